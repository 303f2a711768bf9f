package idemecho

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// HTTPErrorHandler renders every error that reaches echo as an RFC 9457
// problem (application/problem+json), so that a service's refusals all have
// one shape: *echo.HTTPError keeps its status and message (type
// "about:blank", as RFC 9457 prescribes for plain HTTP statuses); anything
// else is a 500 whose details stay in the server's logs. Install it with
// e.HTTPErrorHandler = idemecho.HTTPErrorHandler.
func HTTPErrorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	status, detail := http.StatusInternalServerError, ""
	var he *echo.HTTPError
	if errors.As(err, &he) {
		status = he.Code
		if he.Message != nil {
			detail = fmt.Sprint(he.Message)
		}
	}
	body, _ := json.Marshal(idemtype.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
	c.Response().Header().Set(echo.HeaderContentType, idemtype.ProblemContentType)
	c.Response().WriteHeader(status)
	c.Response().Write(body)
}

// StrictJSONBinder is an echo.Binder for request bodies that refuses what
// echo's default binder lets through: a content type other than JSON (415),
// unknown members, trailing data (400). oapi-codegen's strict handlers defer
// to a custom binder for bodies. Install it with e.Binder = idemecho.StrictJSONBinder{}.
type StrictJSONBinder struct{}

// Bind decodes the JSON request body into i.
func (StrictJSONBinder) Bind(i any, c echo.Context) error {
	r := c.Request()
	mt, _, err := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType))
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return echo.NewHTTPError(http.StatusUnsupportedMediaType, "send the body as application/json")
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(i); err != nil {
		return echo.NewHTTPError(http.StatusBadRequest, "malformed JSON body: "+err.Error())
	}
	if dec.More() {
		return echo.NewHTTPError(http.StatusBadRequest, "malformed JSON body: data after the value")
	}
	return nil
}
