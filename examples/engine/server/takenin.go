package server

import "net/http"

// TakenInHeader is the header of the P/D proxy's decode-failover handshake
// (examples/proxy/pd, failover.go). A decode leg that carries it is
// answered, before the engine loop gets the request and so before any KV
// of it can be read, with an informational "103 Early Hints" carrying
// "TakenInHeader: 1". A decode engine whose connection breaks before that
// answer read nothing for the request, and the proxy may send it to another
// decode engine; once it came, the leg is not retried elsewhere. Requests
// without the header (vLLM's proxies, curl) get no 1xx answer.
const TakenInHeader = "Gonixl-Taken-In"

// announceTakenIn writes the 103 answer; net/http flushes an informational
// answer at once. The header is not repeated on the final answer.
func announceTakenIn(w http.ResponseWriter) {
	w.Header().Set(TakenInHeader, "1")
	w.WriteHeader(http.StatusEarlyHints)
	w.Header().Del(TakenInHeader)
}
