package stack

import (
	"fmt"
	"net"
	"net/http"
	"time"

	renderserver "github.com/gonixl/gonixl/examples/render/server"
)

// startRender starts the render tier's render server (examples/render/server)
// on 127.0.0.1, with cfg.Chat's configuration being the default pipeline's:
// the proxy derenders streams with cfg.Chat, which must split as the server
// does.
func (s *Stack) startRender(cfg Config) error {
	rs, err := renderserver.New(renderserver.Config{Workers: cfg.RenderWorkers, ServedModelName: cfg.ServedModelName})
	if err != nil {
		return fmt.Errorf("render server: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("render server: %w", err)
	}
	s.renderHTTP = &http.Server{Handler: rs.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.RenderURL = "http://" + ln.Addr().String()
	go s.renderHTTP.Serve(ln) //nolint:errcheck // ends with ErrServerClosed at close
	return nil
}
