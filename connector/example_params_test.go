package connector_test

import (
	"encoding/json"
	"fmt"

	"github.com/gonixl/gonixl/connector"
)

// A decode engine reads the decode leg's kv_transfer_params into Params,
// whichever connector wrote them: the keys both know are fields, a
// connector's own keys ride in Extra and go back out unchanged.
func ExampleParams() {
	leg := `{"do_remote_prefill":true,"remote_engine_id":"prefill-0","remote_host":"10.0.0.7","remote_port":5600,` +
		`"remote_request_id":"req-1-3f2a9c01","remote_block_ids":[[4,5,6]],"tp_size":2,"transfer_mode":"pull",` +
		`"remote_blocks_expiry_time":1765000000.5}`
	var p connector.Params
	if err := json.Unmarshal([]byte(leg), &p); err != nil {
		panic(err)
	}
	fmt.Println(p.RemoteEngineID, p.RemoteBlockIDs, p.TPSize, p.TransferMode)
	fmt.Println(string(p.Extra["remote_blocks_expiry_time"]))
	// Output:
	// prefill-0 [4 5 6] 2 pull
	// 1765000000.5
}
