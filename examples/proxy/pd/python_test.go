package pd

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// pythonClient is an OpenAI-style streaming client with nothing but the standard library:
// it POSTs a completion with stream=true and prints the payload of every "data:" line.
const pythonClient = `
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/v1/completions",
    data=json.dumps({"model": "toy", "prompt": "hello", "max_tokens": 2, "stream": True,
                     "stream_options": {"include_usage": True}}).encode(),
    headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=10) as resp:
    assert resp.status == 200, resp.status
    assert resp.headers["Content-Type"].startswith("text/event-stream"), resp.headers["Content-Type"]
    text = ""
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        payload = line[len("data:"):].strip()
        print(payload)
        if payload == "[DONE]":
            break
        for ch in json.loads(payload)["choices"]:
            text += ch["text"]
    print("TEXT=" + text)
`

func TestPythonStreamingClient(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	pf := newFake(t, "prefill", "pull", nil)
	df := newFake(t, "decode", "pull", func(f *fake, w http.ResponseWriter, r *http.Request, rec recorded) {
		streamSSE(w, func(int) { time.Sleep(5 * time.Millisecond) })
	})
	h := newHarness(t, Config{}, []*fake{pf}, []*fake{df})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", pythonClient, h.front.URL).CombinedOutput()
	if err != nil {
		t.Fatalf("python client: %v\n%s", err, out)
	}
	var want []string
	for _, c := range sseChunks {
		want = append(want, strings.TrimSpace(strings.TrimPrefix(c, "data:")))
	}
	want = append(want, "TEXT= world")
	if got := strings.Split(strings.TrimSpace(string(out)), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("python client printed:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
	if len(df.requests()) != 1 || df.requests()[0].body["stream"] != true {
		t.Fatal("decode did not get the streaming request")
	}
}
