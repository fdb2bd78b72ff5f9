package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// servedModels asks an OpenAI-compatible server's GET /v1/models which
// models it serves, in its order.
func servedModels(ctx context.Context, baseURL string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	url := strings.TrimRight(baseURL, "/") + "/v1/models"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	var ids []string
	for _, m := range list.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("GET %s: no models listed", url)
	}
	return ids, nil
}

// defaultModel picks the model requests carry when -model is not given:
// the first that the server lists, as vLLM's benchmark does; else (no
// /v1/models) the preset's, with a note on w.
func defaultModel(ctx context.Context, baseURL, presetModel string, w io.Writer) string {
	ids, err := servedModels(ctx, baseURL)
	if err != nil {
		fmt.Fprintf(w, "bench: no -model and no model list from the server (%v): using the preset's %q\n", err, presetModel)
		return presetModel
	}
	if len(ids) > 1 {
		fmt.Fprintf(w, "bench: no -model: using %q, the first of the models %s serves (%s); -model picks another\n", ids[0], baseURL, strings.Join(ids, ", "))
	} else {
		fmt.Fprintf(w, "bench: no -model: using %q, the model %s serves\n", ids[0], baseURL)
	}
	return ids[0]
}

// explain404 adds to an error that is a 404 (the server does not serve the
// model asked for) the models that the server does serve.
func explain404(ctx context.Context, baseURL, model string, err error) error {
	if err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		return err
	}
	ids, lerr := servedModels(ctx, baseURL)
	if lerr != nil {
		return fmt.Errorf("%w (model %q; asking the server which models it serves: %v)", err, model, lerr)
	}
	return fmt.Errorf("%w: the server at %s does not serve model %q; it serves %s (pass one as -model, or leave -model out to use the first)",
		err, baseURL, model, quoteAll(ids))
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
