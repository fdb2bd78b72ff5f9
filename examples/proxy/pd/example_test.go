package pd_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/gonixl/gonixl/examples/proxy/pd"
)

// A proxy whose engines come from a registry: it serves once a prefill and a decode engine
// that may be paired are members, and a restart of an engine (a new incarnation) replaces it.
func ExampleProxy_SetMembers() {
	p, err := pd.New(pd.Config{Dynamic: true, Connector: pd.ConnectorPull})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	health := func() string {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthcheck", nil))
		return fmt.Sprint(rec.Code, " ", rec.Body.String())
	}
	fmt.Println(health())
	prefill := pd.Member{Role: "prefill", URL: "127.0.0.1:8100", EngineID: "prefill-0", Incarnation: "a1",
		Connector: "pull", CompatHash: "h1", SideChannelHost: "127.0.0.1", SideChannelPort: 5600, TPSize: 1}
	decode := pd.Member{Role: "decode", URL: "127.0.0.1:8200", EngineID: "decode-0", Incarnation: "b1",
		Connector: "pull", CompatHash: "h2", SideChannelHost: "127.0.0.1", SideChannelPort: 5601, TPSize: 1}
	p.SetMembers([]pd.Member{prefill, decode}) // another model geometry: never paired
	fmt.Println(health())
	decode.CompatHash, decode.Incarnation = "h1", "b2" // decode-0 restarted with prefill's geometry
	p.SetMembers([]pd.Member{prefill, decode})
	fmt.Println(health())
	// Output:
	// 503 {"status":"unavailable","prefill_in_rotation":0,"decode_in_rotation":0,"compatible_pair":false}
	// 503 {"status":"unavailable","prefill_in_rotation":1,"decode_in_rotation":1,"compatible_pair":false}
	// 200 {"status":"ok"}
}
