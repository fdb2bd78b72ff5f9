package apierror

import "testing"

func TestBody(t *testing.T) {
	for _, tc := range []struct {
		status     int
		param, msg string
		want       string
	}{
		{400, "max_tokens", "max_tokens must be an integer, got a string; write the number without quotes.",
			`{"error":{"message":"max_tokens must be an integer, got a string; write the number without quotes.","type":"invalid_request_error","param":"max_tokens","code":400}}` + "\n"},
		{502, "", "decode engine <x> broke off", `{"error":{"message":"decode engine <x> broke off","type":"server_error","param":null,"code":502}}` + "\n"},
	} {
		if got := string(Body(tc.status, tc.param, tc.msg)); got != tc.want {
			t.Errorf("Body(%d, %q, %q):\n got %q\nwant %q", tc.status, tc.param, tc.msg, got, tc.want)
		}
	}
}
