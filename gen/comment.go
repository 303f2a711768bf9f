package gen

import (
	"strings"

	. "github.com/dave/jennifer/jen"
)

// commentWidth is the column generated comments wrap at, counting a tab of
// indentation as four.
const commentWidth = 100

// doc writes a comment of paragraphs, each wrapped at commentWidth for a
// comment indented depth tabs, separated by an empty comment line; empty
// paragraphs are left out. An operation's doc ends, as ogen's do, with the
// operation's summary and its METHOD /path (see opParagraphs).
func doc(depth int, paragraphs ...string) Code {
	lines := commentLines(commentWidth-4*depth, paragraphs...)
	if len(lines) == 0 {
		return Null()
	}
	return Comment(strings.Join(lines, "\n"))
}

// nobreak keeps s on one line of a comment, as a route should be.
func nobreak(s string) string { return strings.ReplaceAll(s, " ", nbsp) }

// nbsp stands for a space where commentLines must not break a line.
const nbsp = "\x00"

// commentLines returns the lines of a comment, "//" included.
func commentLines(width int, paragraphs ...string) []string {
	var lines []string
	for _, p := range paragraphs {
		words := strings.Fields(p)
		if len(words) == 0 {
			continue
		}
		if len(lines) > 0 {
			lines = append(lines, "//")
		}
		line := "//"
		for _, w := range words {
			if len(line) > 2 && len(line)+1+len(w) > width {
				lines = append(lines, line)
				line = "//"
			}
			line += " " + w
		}
		lines = append(lines, line)
	}
	for i, l := range lines {
		lines[i] = strings.ReplaceAll(l, nbsp, " ")
	}
	return lines
}

// opParagraphs are the paragraphs that end an operation's doc: its
// summary, if it has one, and its route.
func opParagraphs(summary, method, path string) []string {
	return []string{summary, nobreak(method + " " + path)}
}
