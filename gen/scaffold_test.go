package gen

import "testing"

// TestSnake checks scaffold file names: an initialism stays one word, so
// GetHTTPStatus gets get_http_status_phases.go, not get_h_t_t_p_status.
func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"CreatePayment": "create_payment",
		"createPayment": "create_payment",
		"GetHTTPStatus": "get_http_status",
		"HTTPServer":    "http_server",
		"userID":        "user_id",
		"ID":            "id",
		"GetUserIDs":    "get_user_ids",
		"ListIDsByDate": "list_ids_by_date",
		"HTTPSend":      "http_send",
		"PutV2Order":    "put_v2_order",
		"a":             "a",
		"":              "",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}
