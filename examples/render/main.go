// Command render is the render tier of a tokens-only serving stack, as
// vLLM's `vllm launch render`: it serves POST /v1/chat/completions/render
// (chat request -> prompt token ids) and POST /v1/chat/completions/derender
// (generated token ids -> content, reasoning, tool calls), plus /health and
// /metrics, on CPU only. docs/render.md describes the protocol.
//
//	render -port 8300 -workers 1
//
// SIGINT or SIGTERM stops accepting, lets requests in flight finish (at most
// -drain-timeout), and exits; a second signal exits at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/gonixl/gonixl/examples/render/chat"
	"github.com/gonixl/gonixl/examples/render/server"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 8300, "port to listen on (0 picks a free one; the address is logged)")
	workers := fs.Int("workers", 1, "renders and derenders run at once (vLLM's --renderer-num-workers)")
	model := fs.String("served-model-name", "", "the only model name requests may carry (\"\" accepts any)")
	encoding := fs.String("tokenizer", "cl100k_base", "tiktoken-go embedded encoding (cl100k_base, o200k_base)")
	templatePath := fs.String("chat-template", "", "Jinja chat template file (\"\" is the built-in Qwen3-style template)")
	reasoning := fs.String("reasoning-parser", chat.ReasoningQwen3, "reasoning parser: qwen3 or none (must match the engine's)")
	tools := fs.String("tool-call-parser", chat.ToolHermes, "tool-call parser: hermes or none (must match the engine's)")
	maxLen := fs.Int("max-model-len", chat.DefaultMaxModelLen, "prompt plus output tokens bound")
	drain := fs.Duration("drain-timeout", 30*time.Second, "bound on the wait for requests in flight at shutdown")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := zap.NewProduction()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	cfg := server.Config{Workers: *workers, ServedModelName: *model,
		Chat: chat.Config{Encoding: *encoding, ReasoningParser: *reasoning, ToolParser: *tools, MaxModelLen: *maxLen}}
	if *templatePath != "" {
		b, err := os.ReadFile(*templatePath)
		if err != nil {
			return fmt.Errorf("reading -chat-template: %w", err)
		}
		cfg.Chat.Template = string(b)
	}
	s, err := server.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("render server listening", zap.String("addr", ln.Addr().String()), zap.Int("workers", *workers),
		zap.String("tokenizer", *encoding), zap.String("reasoning_parser", *reasoning), zap.String("tool_call_parser", *tools))

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	select {
	case err := <-served:
		return err
	case sig := <-sigs:
		log.Info("signal received: shutting down (a second signal forces exit)", zap.String("signal", sig.String()))
	}
	go func() {
		<-sigs
		log.Warn("second signal: exiting now")
		os.Exit(1)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("render server stopped")
	return nil
}
