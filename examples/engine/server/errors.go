package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strings"

	"github.com/gonixl/gonixl/examples/apierror"
	"github.com/gonixl/gonixl/pullconn"
)

// The engine answers every error with OpenAI's shape,
//
//	{"error":{"message":"...","type":"...","param":"max_tokens","code":400}}
//
// and two of OpenAI's types: invalid_request_error for every 4xx (the client
// can fix the request) and server_error for every 5xx (it cannot; retrying may
// help). param names the request field at fault (null when none is); code is
// the HTTP status, as vLLM sends it. The P/D proxy (examples/proxy/pd) writes
// the same shape and types, so a client sees one vocabulary whichever answers.

// apiError is an error answer the engine loop builds. typ is kept for the
// loop's literals; the answer's type follows code. param names the request
// field at fault ("" when none is: a timeout, a failed transfer).
type apiError struct {
	code  int
	typ   string
	msg   string
	param string
}

// fieldError is an error answer about the request, with the field at fault.
type fieldError struct {
	code  int
	param string // "" when no one field is at fault
	msg   string
}

// badRequest is a 400 about param.
func badRequest(param, format string, args ...any) *fieldError {
	return &fieldError{http.StatusBadRequest, param, fmt.Sprintf(format, args...)}
}

// errorBody is the JSON of an error answer, newline-terminated.
func errorBody(code int, param, msg string) []byte { return apierror.Body(code, param, msg) }

func writeErrorBody(w http.ResponseWriter, code int, param, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(errorBody(code, param, msg))
}

func writeError(w http.ResponseWriter, e *apiError) { writeErrorBody(w, e.code, e.param, e.msg) }

func writeFieldError(w http.ResponseWriter, e *fieldError) { writeErrorBody(w, e.code, e.param, e.msg) }

// decodeJSON unmarshals body into v and explains a failure in the client's
// terms: the field at fault, what it must be, what it was, never a Go type.
// prefix is prepended to field paths (for a nested object decoded alone).
func decodeJSON(body []byte, v any, prefix string) *fieldError {
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	what := "The request body"
	if prefix != "" {
		what = strings.TrimSuffix(prefix, ".")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) && strings.Contains(se.Error(), "unexpected end of JSON input") {
		return badRequest(strings.TrimSuffix(prefix, "."), "%s is not valid JSON (it ends early); send a JSON object.", what)
	}
	if errors.As(err, &se) {
		return badRequest(strings.TrimSuffix(prefix, "."), "%s is not valid JSON (%s, at byte %d); send a JSON object.", what, se.Error(), se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		got := jsonKind(te.Value)
		if te.Field == "" {
			return badRequest(strings.TrimSuffix(prefix, "."), "%s must be a JSON object, got %s.", what, got)
		}
		field := prefix + te.Field
		want, hint := wantKind(te.Type)
		if te.Value == "string" && hint != "" {
			got += "; " + hint
		}
		return badRequest(field, "%s must be %s, got %s.", field, want, got)
	}
	return badRequest(strings.TrimSuffix(prefix, "."), "%s could not be read as JSON; send a JSON object.", what)
}

// jsonKind names the JSON value encoding/json saw ("string", "number 1.5").
func jsonKind(v string) string {
	switch {
	case v == "string":
		return "a string"
	case v == "bool":
		return "a boolean"
	case v == "array":
		return "an array"
	case v == "object":
		return "an object"
	case v == "number":
		return "a number"
	case strings.HasPrefix(v, "number "):
		return strings.TrimPrefix(v, "number ")
	}
	return v
}

// wantKind names the JSON value a Go type takes, and what to do when the
// client quoted it.
func wantKind(t reflect.Type) (want, hint string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer", "write the number without quotes"
	case reflect.Float32, reflect.Float64:
		return "a number", "write the number without quotes"
	case reflect.Bool:
		return "true or false", "write it without quotes"
	case reflect.String:
		return "a string", ""
	case reflect.Slice, reflect.Array:
		return "an array", ""
	}
	return "an object", ""
}

// paramsField finds the Params field a connector's error names
// ("Params.RemotePort is 0, want 1..65535").
var paramsField = regexp.MustCompile(`\bParams\.([A-Z][A-Za-z]*)`)

// rankPrefix is what the engine loop and the connector put before a rank's
// refusal of a load: `rank 1: request "<id>": `.
var rankPrefix = regexp.MustCompile(`^(rank \d+: )?(request "[^"]*": )?`)

// kvError turns a connector's error about a request's Params into the
// answer's param, the kv_transfer_params key it is about
// ("kv_transfer_params.remote_port", or kv_transfer_params itself when it
// names no field), and a message in the client's terms: the key for the Go
// field name, without the package's prefix.
func kvError(err error) (param, msg string) {
	param = "kv_transfer_params"
	msg = err.Error()
	for _, prefix := range []string{"pullconn: invalid argument: ", "pushconn: invalid argument: ", "pullconn: ", "pushconn: "} {
		msg = strings.ReplaceAll(msg, prefix, "")
	}
	m := paramsField.FindStringSubmatch(msg)
	if m == nil {
		return param, param + ": " + msg
	}
	// Which rank refused it and the engine's own id of the request say
	// nothing to the client.
	msg = rankPrefix.ReplaceAllString(msg, "")
	if key := jsonKey(reflect.TypeFor[pullconn.Params](), m[1]); key != "" {
		param += "." + key
		msg = strings.Replace(msg, m[0], param, 1)
		return param, msg
	}
	return param, param + ": " + msg
}

// jsonKey returns the JSON key of t's field name, looking into embedded
// structs; "" when t has no such field.
func jsonKey(t reflect.Type, name string) string {
	f, ok := t.FieldByName(name)
	if !ok {
		return ""
	}
	key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if key == "" || key == "-" {
		return ""
	}
	return key
}
