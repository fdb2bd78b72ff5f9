package pushconn

import "regexp"

// sideErrors returns what NewProducer and NewConsumer answer a Config
// whose one fault is want: a field only one side reads is checked by that
// side, and refused by the other as set for it.
func sideErrors(want string) (producer, consumer string) {
	m := configField.FindStringSubmatch(want)
	if m == nil {
		return want, want
	}
	switch m[1] {
	case "CancelTimeout":
		return "pushconn: invalid argument: Config." + m[1] + " is set for a Producer (prefill), which does not read it: it is decode's (a Consumer's) setting", want
	case "WriteTimeout", "MaxPeers", "MaxPendingRegistrations":
		return want, "pushconn: invalid argument: Config." + m[1] + " is set for a Consumer (decode), which does not read it: it is prefill's (a Producer's) setting"
	}
	return want, want
}

var configField = regexp.MustCompile(`\bConfig\.(\w+)`)
