package pullconn

// checkSide refuses the Config fields that only the other side reads: a
// Producer (prefill) given a decode field, or a Consumer (decode) given a
// prefill field, would otherwise ignore it without a word.
func (c *Config) checkSide(prefill bool) error {
	type field struct {
		name string
		set  bool
	}
	others := []field{{"HeartbeatExtension", c.HeartbeatExtension != 0}, {"ParamsAfterAllRanks", c.ParamsAfterAllRanks}}
	rank, other := "a Consumer (decode)", "prefill's (a Producer's)"
	if prefill {
		others = []field{{"HeartbeatInterval", c.HeartbeatInterval != 0}, {"TransferTimeout", c.TransferTimeout != 0},
			{"ExpiryMargin", c.ExpiryMargin != 0}, {"KeepAliveTimeout", c.KeepAliveTimeout != 0}, {"Inline", c.Inline}}
		rank, other = "a Producer (prefill)", "decode's (a Consumer's)"
	}
	for _, f := range others {
		if f.set {
			return invalidf("Config.%s is set for %s, which does not read it: it is %s setting", f.name, rank, other)
		}
	}
	return nil
}
