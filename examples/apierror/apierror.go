// Package apierror is the error body the reference engine and the P/D proxy
// answer with, so that a client sees one shape and one vocabulary from both:
// OpenAI's
//
//	{"error":{"message":"...","type":"...","param":null,"code":400}}
//
// with two of OpenAI's types, invalid_request_error for every 4xx (the client
// can fix the request) and server_error for every 5xx (an engine failed,
// none is in rotation, or it is closing; another try may succeed). param
// names the request field at fault, null when none is; code is the HTTP
// status, as vLLM sends it.
package apierror

import (
	"bytes"
	"encoding/json"
)

// Type returns the OpenAI error type of an HTTP status.
func Type(status int) string {
	if status >= 500 {
		return "server_error"
	}
	return "invalid_request_error"
}

type detail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// Body returns the JSON of an error answer (or of a stream's error event),
// newline-terminated; param "" is null.
func Body(status int, param, msg string) []byte {
	d := detail{Message: msg, Type: Type(status), Code: status}
	if param != "" {
		d.Param = &param
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // messages quote prompts and templates: keep < and > readable
	_ = enc.Encode(map[string]detail{"error": d})
	return b.Bytes()
}
