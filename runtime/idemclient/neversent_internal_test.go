package idemclient

import (
	"errors"
	"fmt"
	"net/url"
	"testing"
)

// TestNeverSentMatchesNetHTTPsWordsOnly: the HTTP/2 errors that prove a
// request unprocessed are recognised as net/http words them, wrapped as
// Client.Do wraps them; a GOAWAY for a stream the server may have
// processed is not, though its debug data (the server's) quotes them.
func TestNeverSentMatchesNetHTTPsWordsOnly(t *testing.T) {
	wrap := func(err error) error { return &url.Error{Op: "Post", URL: "http://x/y", Err: err} }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{errors.New("http2: Transport received Server's graceful shutdown GOAWAY"), true},
		{errors.New("http2: Transport received GOAWAY from server ErrCode:ENHANCE_YOUR_CALM"), true},
		{errors.New("stream error: stream ID 17; REFUSED_STREAM; received from peer"), true},
		{errors.New(`http2: server sent GOAWAY and closed the connection; LastStreamID=3, ErrCode=NO_ERROR, debug="; REFUSED_STREAM; "`), false},
		{errors.New(`http2: server sent GOAWAY and closed the connection; LastStreamID=3, ErrCode=NO_ERROR, debug="http2: Transport received GOAWAY from server ErrCode:NO_ERROR"`), false},
		{fmt.Errorf("read: %w", errors.New("connection reset by peer")), false},
	} {
		if got := neverSent(wrap(tc.err), nil); got != tc.want {
			t.Errorf("%v: never sent %v; want %v", tc.err, got, tc.want)
		}
	}
}
