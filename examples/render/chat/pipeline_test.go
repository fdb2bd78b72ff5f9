package chat

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func mustPipeline(t testing.TB, cfg Config) *Pipeline {
	t.Helper()
	p, err := New(cfg)
	require.NoError(t, err)
	return p
}

func TestRenderTextQwen3Style(t *testing.T) {
	p := mustPipeline(t, Config{})
	var req Request
	require.NoError(t, json.Unmarshal([]byte(`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`), &req))
	text, err := p.RenderText(&req)
	require.NoError(t, err)
	require.Equal(t, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", text)

	req.ChatTemplateKwargs = map[string]any{"enable_thinking": false}
	text, err = p.RenderText(&req)
	require.NoError(t, err)
	require.Equal(t, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", text)

	ids, err := p.Render(&req)
	require.NoError(t, err)
	require.Equal(t, text, p.Detokenize(ids))
	require.Equal(t, 100277, ids[0])
}
