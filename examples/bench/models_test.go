package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeServer lists models and answers every completion 404, as vLLM does
// for a model it does not serve.
func fakeServer(t *testing.T, models ...string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			var data []string
			for _, m := range models {
				data = append(data, `{"id":"`+m+`","object":"model"}`)
			}
			w.Write([]byte(`{"object":"list","data":[` + strings.Join(data, ",") + `]}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":{"code":404,"message":"The model does not exist.","type":"invalid_request_error"}}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestDefaultModelAsksTheServer(t *testing.T) {
	var w bytes.Buffer
	srv := fakeServer(t, "Qwen/Qwen3-32B", "other")
	assert.Equal(t, "Qwen/Qwen3-32B", defaultModel(context.Background(), srv.URL, "preset-model", &w))
	assert.Contains(t, w.String(), `bench: no -model: using "Qwen/Qwen3-32B", the first of the models `+srv.URL+` serves (Qwen/Qwen3-32B, other)`)

	w.Reset()
	one := fakeServer(t, "only")
	assert.Equal(t, "only", defaultModel(context.Background(), one.URL, "preset-model", &w))

	w.Reset()
	none := httptest.NewServer(http.NotFoundHandler())
	defer none.Close()
	assert.Equal(t, "preset-model", defaultModel(context.Background(), none.URL, "preset-model", &w))
	assert.Contains(t, w.String(), `using the preset's "preset-model"`)
}

func TestExplain404ListsTheModels(t *testing.T) {
	srv := fakeServer(t, "a", "b")
	err := explain404(context.Background(), srv.URL, "nope", assert.AnError)
	assert.Equal(t, assert.AnError, err, "not a 404: unchanged")
	err = explain404(context.Background(), srv.URL, "nope", errString("warm-up request 0: HTTP 404: The model `nope` does not exist."))
	assert.EqualError(t, err, "warm-up request 0: HTTP 404: The model `nope` does not exist.: the server at "+srv.URL+` does not serve model "nope"; it serves "a", "b" (pass one as -model, or leave -model out to use the first)`)
}

type errString string

func (e errString) Error() string { return string(e) }

// End to end: a wrong -model fails with the list; no -model takes the
// listed one (the fake then answers 404 too, and the error names it).
func TestRunWrongModelSaysWhichExist(t *testing.T) {
	srv := fakeServer(t, "served-model")
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-base-url", srv.URL, "-model", "wrong", "-num-prompts", "1", "-num-warmups", "1"}, &out, &errOut)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `does not serve model "wrong"; it serves "served-model"`)

	err = run(context.Background(), []string{"-base-url", srv.URL, "-num-prompts", "1", "-num-warmups", "1"}, &out, &errOut)
	require.Error(t, err)
	assert.Contains(t, errOut.String(), `bench: no -model: using "served-model"`)
}
