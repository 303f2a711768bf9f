package spec

import (
	"os"
	"strings"
)

// sourceLines is a document's text split into lines on first use: only
// errors need it, and a valid spec of megabytes is not split for nothing.
// The text of a file other than the root (path, set instead of data) is
// read then too.
type sourceLines struct {
	data  []byte
	path  string
	lines []string
	split bool
}

func (s *sourceLines) get() []string {
	if !s.split {
		if s.data == nil && s.path != "" {
			s.data, _ = os.ReadFile(s.path)
		}
		s.lines, s.split = strings.Split(string(s.data), "\n"), true
	}
	return s.lines
}

// findLine points at the line of field within the operation's block, the
// extension's line, or the operation's line, whichever it can find.
func findLine(src *sourceLines, op *Operation, field string) int {
	if src.data == nil && src.path == "" {
		return 0 // no text to point into (an overlaid document)
	}
	lines := src.get()
	if op.line <= 0 || op.line > len(lines) {
		return op.line
	}
	end := len(lines)
	if o := op.Op.Origin; o != nil && o.Key != nil && o.Key.EndLine >= op.line {
		end = o.Key.EndLine
	}
	parts := strings.FieldsFunc(field, func(r rune) bool { return r == '.' || r == '[' })
	line := op.line
	for _, part := range parts {
		if strings.HasSuffix(part, "]") {
			continue // list indexes: stay on the list's line
		}
		for i := line; i <= end && i <= len(lines); i++ {
			t := strings.TrimLeft(lines[i-1], " \t-{")
			if strings.HasPrefix(t, part+":") || strings.HasPrefix(t, `"`+part+`"`) || strings.Contains(lines[i-1], " "+part+":") || strings.Contains(lines[i-1], `"`+part+`":`) {
				line = i
				break
			}
		}
	}
	return line
}
