package spec

import (
	"errors"
	"strconv"
	"strings"
)

// Error is one problem in a spec, located as precisely as the document allows.
type Error struct {
	File        string
	Line        int // 0 when unknown
	Method      string
	Path        string
	OperationID string
	Field       string
	Message     string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Method != "" {
		b.WriteString(e.Method + " " + e.Path)
		if e.OperationID != "" {
			b.WriteString(" (" + e.OperationID + ")")
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Errors is every problem found in a spec.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// IsErrors reports whether err lists spec problems (as opposed to an I/O or
// parse failure).
func IsErrors(err error) bool {
	var es Errors
	return errors.As(err, &es)
}
