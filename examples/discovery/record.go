package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Roles a Record may carry.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// maxValue bounds a record's JSON: a record is a few hundred bytes.
const maxValue = 64 << 10

// Record is what an engine publishes about itself.
type Record struct {
	// EngineID is the engine's id; with Role it names the key. An engine
	// that restarts under the same id publishes a new Incarnation.
	EngineID string `json:"engine_id"`
	// Role is "prefill" or "decode".
	Role string `json:"role"`
	// HTTPAddr is the engine's HTTP API, host:port.
	HTTPAddr string `json:"http_addr"`
	// SideChannelAddr is the connector's side channel, host:port.
	SideChannelAddr string `json:"side_channel_addr"`
	// Connector is "pull" or "push".
	Connector string `json:"connector"`
	// TPSize and PPSize are the engine's tensor- and pipeline-parallel sizes.
	TPSize int `json:"tp_size"`
	PPSize int `json:"pp_size"`
	// Model is the served model name.
	Model string `json:"model"`
	// CompatHash digests what a prefill and a decode engine must share for
	// their KV blocks to fit each other (connector, model geometry, dtype,
	// block size); engines whose hashes differ are never paired.
	CompatHash string `json:"compat_hash"`
	// Incarnation is random for every start of the engine process.
	Incarnation string `json:"incarnation"`
}

// Prefix returns the key prefix of a cluster's engines,
// "/gonixl/<cluster>/engines/".
func Prefix(cluster string) string { return "/gonixl/" + cluster + "/engines/" }

// Key returns the record's key, "/gonixl/<cluster>/engines/<role>/<engine_id>".
func (r Record) Key(cluster string) string { return Prefix(cluster) + r.Role + "/" + r.EngineID }

// URL returns the engine's HTTP base URL, "http://host:port".
func (r Record) URL() string { return "http://" + r.HTTPAddr }

// SideChannel splits SideChannelAddr into host and port.
func (r Record) SideChannel() (string, int, error) {
	h, p, err := net.SplitHostPort(r.SideChannelAddr)
	if err != nil {
		return "", 0, fmt.Errorf("discovery: side_channel_addr %q: %w", r.SideChannelAddr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("discovery: side_channel_addr %q: port is not in 1..65535", r.SideChannelAddr)
	}
	return h, port, nil
}

// Validate checks that every field is usable.
func (r Record) Validate() error {
	var errs []error
	if !validName(r.EngineID) {
		errs = append(errs, fmt.Errorf("engine_id %q: want 1 to 200 characters, no '/' or spaces", r.EngineID))
	}
	if r.Role != RolePrefill && r.Role != RoleDecode {
		errs = append(errs, fmt.Errorf("role %q: want %q or %q", r.Role, RolePrefill, RoleDecode))
	}
	if h, p, err := net.SplitHostPort(r.HTTPAddr); err != nil || h == "" {
		errs = append(errs, fmt.Errorf("http_addr %q: want host:port", r.HTTPAddr))
	} else if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
		errs = append(errs, fmt.Errorf("http_addr %q: port is not in 1..65535", r.HTTPAddr))
	}
	if _, _, err := r.SideChannel(); err != nil {
		errs = append(errs, errors.New(strings.TrimPrefix(err.Error(), "discovery: ")))
	}
	if r.Connector != "pull" && r.Connector != "push" {
		errs = append(errs, fmt.Errorf("connector %q: want \"pull\" or \"push\"", r.Connector))
	}
	if r.TPSize < 1 || r.PPSize < 1 {
		errs = append(errs, fmt.Errorf("tp_size %d, pp_size %d: want >= 1", r.TPSize, r.PPSize))
	}
	if r.Model == "" || r.CompatHash == "" || r.Incarnation == "" {
		errs = append(errs, fmt.Errorf("model %q, compat_hash %q, incarnation %q: none may be empty", r.Model, r.CompatHash, r.Incarnation))
	}
	if len(errs) > 0 {
		return fmt.Errorf("discovery: record of %q: %w", r.EngineID, errors.Join(errs...))
	}
	return nil
}

func validName(s string) bool {
	return s != "" && len(s) <= 200 && !strings.ContainsAny(s, "/ \t\r\n")
}

// Decode reads the record stored under key in cluster: the value must be a
// valid Record whose role and engine id are the key's.
func Decode(cluster, key string, value []byte) (Record, error) {
	var r Record
	rest, ok := strings.CutPrefix(key, Prefix(cluster))
	if !ok {
		return r, fmt.Errorf("discovery: key %q is not under %q", key, Prefix(cluster))
	}
	role, id, ok := strings.Cut(rest, "/")
	if !ok || role == "" || id == "" {
		return r, fmt.Errorf("discovery: key %q: want %s<role>/<engine_id>", key, Prefix(cluster))
	}
	if len(value) > maxValue {
		return r, fmt.Errorf("discovery: key %q: value of %d bytes, more than %d", key, len(value), maxValue)
	}
	// Unknown fields are allowed: a newer engine may publish more.
	if err := json.Unmarshal(value, &r); err != nil {
		return Record{}, fmt.Errorf("discovery: key %q: value is not a record: %w", key, err)
	}
	if r.Role != role || r.EngineID != id {
		return Record{}, fmt.Errorf("discovery: key %q holds the record of %s engine %q", key, r.Role, r.EngineID)
	}
	if err := r.Validate(); err != nil {
		return Record{}, fmt.Errorf("discovery: key %q: %w", key, err)
	}
	return r, nil
}
