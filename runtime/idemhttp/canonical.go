package idemhttp

import (
	"bytes"
	"cmp"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// The canonical form of a JSON body is written in one pass over its bytes,
// without building a tree: a small scanner reads tokens and writes each
// value's canonical form as it goes; an object's members are written in the
// order they come, their spans remembered, and put in key order when the
// object closes. Members and elements named by an excluded JSON Pointer are
// scanned (so that an error inside them is still an error) and then cut
// from the output.
//
// The scanner reproduces, error for error, what parsing with
// encoding/json's Decoder.Token did before (reference_test.go keeps that
// implementation, and the differential tests hold the two together): its
// token states, its messages, the point at which each error is found (a
// repeated member name is reported before any error that comes after it in
// the body, nesting is checked before the value is read).

// tokState is the position in the token grammar, as encoding/json's
// Decoder names them.
type tokState uint8

const (
	tokTopValue tokState = iota
	tokArrayStart
	tokArrayValue
	tokArrayComma
	tokObjectStart
	tokObjectKey
	tokObjectColon
	tokObjectValue
	tokObjectComma
)

// tokKind is what a token is.
type tokKind uint8

const (
	tokBeginArray tokKind = iota
	tokEndArray
	tokBeginObject
	tokEndObject
	tokString
	tokNumber
	tokTrue
	tokFalse
	tokNull
)

// member is an object member whose canonical form "name":value is
// out[start:end] (empty when excluded). Its decoded name is
// keys[keyOff:keyEnd] when escaped, in[keyOff:keyEnd] otherwise.
type member struct {
	keyOff, keyEnd int
	escaped        bool
	excluded       bool
	seq            int // position in the object, for the first repeated name
	start, end     int
}

// cursor is an excluded pointer on its way down the body: the pointer's
// index in the exclude list (pointers apply in that order, which matters
// for array indexes) and the offset of its next reference token.
type cursor struct {
	ptr, off int
}

// target is a cursor that goes on into the element of an array at index
// elem of the body as sent.
type target struct {
	elem int
	cur  cursor
}

// canon is the state of one canonicalisation, kept in a pool with its
// buffers so that a request allocates nothing here once warm.
type canon struct {
	in    []byte // the body
	pos   int    // the next byte of in to read
	out   []byte // what is written
	state tokState
	stack []tokState // the states of the open arrays and objects' parents

	lit     []byte // the last string, number or literal read, quotes included
	escaped bool   // lit is a string with a backslash escape
	hasNUL  bool   // lit is a string with \u0000

	members []member // the members of the open objects, in order
	objects []int    // per open object, the index in members of its first
	keys    []byte   // the decoded names of escaped members
	scratch []byte   // room to put an object's members in order

	exclude  []string
	cursors  []cursor // the cursors of the values being read
	targets  []target // the cursors that go into the elements of open arrays
	removals []int    // the elements excluded from open arrays, sorted per array
	every    []cursor // the cursors that go into every element of open arrays
}

var canonPool = sync.Pool{New: func() any { return new(canon) }}

// maxPooled bounds the buffers a canon keeps for the next request, so that
// one large body does not pin its memory.
const maxPooled = 64 << 10

func getCanon() *canon { return canonPool.Get().(*canon) }

func (p *canon) release() {
	if cap(p.out) > maxPooled || cap(p.scratch) > maxPooled || cap(p.keys) > maxPooled || cap(p.members) > maxPooled/64 {
		return
	}
	*p = canon{
		out: p.out[:0], stack: p.stack[:0], members: p.members[:0], objects: p.objects[:0],
		keys: p.keys[:0], scratch: p.scratch[:0], cursors: p.cursors[:0], targets: p.targets[:0], removals: p.removals[:0],
		every: p.every[:0],
	}
	canonPool.Put(p)
}

// appendJSON appends the canonical form of body, without the members and
// elements that exclude names, to p.out.
func (p *canon) appendJSON(body []byte, exclude []string) error {
	if !utf8.Valid(body) {
		return badBody("the JSON body is not valid UTF-8")
	}
	var ptrErr error
	for _, ptr := range exclude {
		if ptrErr = checkPointer(ptr); ptrErr != nil {
			break
		}
	}
	p.in, p.pos, p.state, p.exclude = body, 0, tokTopValue, exclude
	p.stack, p.members, p.objects, p.keys = p.stack[:0], p.members[:0], p.objects[:0], p.keys[:0]
	p.cursors, p.targets, p.removals = p.cursors[:0], p.targets[:0], p.removals[:0]
	var root []cursor
	if ptrErr == nil {
		for i := range exclude {
			p.cursors = append(p.cursors, cursor{ptr: i, off: 1})
		}
		root = p.cursors
	}
	if err := p.value(0, root); err != nil {
		return err
	}
	if _, ok := p.peek(); ok {
		return badBody("malformed JSON body: data after the top-level value")
	}
	return ptrErr // the body is checked first, as when pointers were applied to the parsed body
}

func (p *canon) value(depth int, cur []cursor) error {
	if depth > MaxJSONDepth {
		return p.fail(badBody("the JSON body is nested deeper than %d levels", MaxJSONDepth))
	}
	t, err := p.token()
	if err != nil {
		return p.fail(malformed(err))
	}
	switch t {
	case tokBeginObject:
		return p.object(depth, cur)
	case tokBeginArray:
		return p.array(depth, cur)
	case tokString:
		if p.hasNUL {
			return p.fail(errNUL())
		}
		p.out = appendString(p.out, p.lit[1:len(p.lit)-1], p.escaped)
	case tokNumber:
		p.out = appendNumber(p.out, p.lit)
	case tokTrue, tokFalse, tokNull:
		p.out = append(p.out, p.lit...)
	default: // not reached: a closing delimiter where a value starts is refused by token
		return p.fail(badBody("malformed JSON body: unexpected %c", p.in[p.pos-1]))
	}
	return nil
}

func (p *canon) object(depth int, cur []cursor) error {
	start, base, keysMark := len(p.out), len(p.members), len(p.keys)
	p.out = append(p.out, '{')
	p.objects = append(p.objects, base)
	written := 0
	for p.more() {
		if _, err := p.token(); err != nil { // a name: token refuses anything else here
			return p.fail(malformed(err))
		}
		if p.hasNUL {
			return p.fail(errNUL())
		}
		raw := p.lit[1 : len(p.lit)-1]
		m := member{seq: len(p.members) - base, escaped: p.escaped}
		if m.escaped {
			m.keyOff = len(p.keys)
			p.keys = appendUnescaped(p.keys, raw)
			m.keyEnd = len(p.keys)
		} else {
			m.keyEnd = p.pos - 1
			m.keyOff = m.keyEnd - len(raw)
		}
		mark := len(p.cursors)
		m.excluded = p.follow(cur, p.key(m))
		m.start = len(p.out)
		if !m.excluded {
			if written > 0 {
				p.out = append(p.out, ',')
				m.start++
			}
			p.out = appendString(p.out, raw, m.escaped)
			p.out = append(p.out, ':')
		}
		p.members = append(p.members, m)
		if err := p.value(depth+1, p.cursors[mark:]); err != nil {
			return err
		}
		p.cursors = p.cursors[:mark]
		if m.excluded {
			p.out = p.out[:m.start]
		} else {
			p.members[len(p.members)-1].end = len(p.out)
			written++
		}
	}
	if _, err := p.token(); err != nil { // '}'
		return p.fail(malformed(err))
	}
	if err := p.sortMembers(start, p.members[base:]); err != nil {
		return err
	}
	p.out = append(p.out, '}')
	p.members, p.objects, p.keys = p.members[:base], p.objects[:len(p.objects)-1], p.keys[:keysMark]
	return nil
}

// follow returns whether an excluded pointer ends at the member named key
// of an object that the cursors in cur have reached, and otherwise appends
// to p.cursors the cursors that go on into its value.
func (p *canon) follow(cur []cursor, key []byte) (excluded bool) {
	mark := len(p.cursors)
	for _, c := range cur {
		tok, next := p.refToken(c)
		if !idemtype.PointerTokenIs(tok, key) {
			continue
		}
		if next < 0 {
			p.cursors = p.cursors[:mark]
			return true
		}
		p.cursors = append(p.cursors, cursor{ptr: c.ptr, off: next})
	}
	return false
}

// refToken returns the (still escaped) reference token of c and the offset
// of the one after it, or -1 when it is the pointer's last.
func (p *canon) refToken(c cursor) (string, int) {
	return refToken(p.exclude[c.ptr], c.off)
}

// refToken returns the reference token of ptr that starts at off and the
// offset of the next one, or -1 when it is the last.
func refToken(ptr string, off int) (string, int) {
	rest := ptr[off:]
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[:i], off + i + 1
	}
	return rest, -1
}

// arrayIndex parses a reference token as an array index: digits without a
// leading zero (or "0"), as strconv.Itoa would write it.
func arrayIndex(tok string, limit int) (int, bool) {
	if tok == "" || len(tok) > 1 && tok[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
		if n > limit { // no element this far: as good as no index
			return 0, false
		}
	}
	return n, true
}

func (p *canon) array(depth int, cur []cursor) error {
	p.out = append(p.out, '[')
	// Resolve the cursors in pointer order: each index counts the elements
	// that earlier pointers left, as when they were removed one by one.
	rmMark, tMark := len(p.removals), len(p.targets)
	// A * step (idemtype.EveryElement) names every element: at the
	// pointer's end it removes them all; before it, its cursor goes on into
	// each element that remains (whatever the order of the pointers: an
	// element removed by another pointer is gone either way).
	all := false
	wMark := len(p.every)
	for _, c := range cur {
		tok, next := p.refToken(c)
		if tok == idemtype.EveryElement {
			if next < 0 {
				all = true
			} else {
				p.every = append(p.every, cursor{ptr: c.ptr, off: next})
			}
			continue
		}
		i, ok := arrayIndex(tok, len(p.in))
		if !ok {
			continue
		}
		for _, r := range p.removals[rmMark:] { // sorted
			if r <= i {
				i++
			}
		}
		if next >= 0 {
			p.targets = append(p.targets, target{elem: i, cur: cursor{ptr: c.ptr, off: next}})
			continue
		}
		at, _ := slices.BinarySearch(p.removals[rmMark:], i)
		p.removals = slices.Insert(p.removals, rmMark+at, i)
	}
	removals, targets, every := p.removals[rmMark:], p.targets[tMark:], p.every[wMark:]
	written := 0
	for elem := 0; p.more(); elem++ {
		mark := len(p.cursors)
		excluded := all || slices.Contains(removals, elem)
		if !excluded {
			for _, t := range targets {
				if t.elem == elem {
					p.cursors = append(p.cursors, t.cur)
				}
			}
			if len(every) > 0 {
				// Cursors go on in pointer order, which the index steps
				// below count in.
				p.cursors = append(p.cursors, every...)
				slices.SortStableFunc(p.cursors[mark:], func(a, b cursor) int { return cmp.Compare(a.ptr, b.ptr) })
			}
		}
		outMark := len(p.out)
		if !excluded && written > 0 {
			p.out = append(p.out, ',')
		}
		if err := p.value(depth+1, p.cursors[mark:]); err != nil {
			return err
		}
		p.cursors = p.cursors[:mark]
		if excluded {
			p.out = p.out[:outMark]
		} else {
			written++
		}
	}
	p.removals, p.targets, p.every = p.removals[:rmMark], p.targets[:tMark], p.every[:wMark]
	if _, err := p.token(); err != nil { // ']'
		return p.fail(malformed(err))
	}
	p.out = append(p.out, ']')
	return nil
}

func (p *canon) key(m member) []byte {
	if m.escaped {
		return p.keys[m.keyOff:m.keyEnd]
	}
	return p.in[m.keyOff:m.keyEnd]
}

func (p *canon) compareMembers(a, b member) int {
	if c := bytes.Compare(p.key(a), p.key(b)); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// sortMembers puts the members ms of the object written from out[start]
// in name order, or reports a repeated name.
func (p *canon) sortMembers(start int, ms []member) error {
	sorted := true
	for i := 1; i < len(ms); i++ {
		if bytes.Compare(p.key(ms[i-1]), p.key(ms[i])) >= 0 {
			sorted = false
			break
		}
	}
	if sorted {
		return nil
	}
	slices.SortFunc(ms, p.compareMembers)
	for i := 1; i < len(ms); i++ {
		if bytes.Equal(p.key(ms[i-1]), p.key(ms[i])) {
			return p.fail(nil)
		}
	}
	s := p.scratch[:0]
	for _, m := range ms {
		if m.excluded {
			continue
		}
		if len(s) > 0 {
			s = append(s, ',')
		}
		s = append(s, p.out[m.start:m.end]...)
	}
	copy(p.out[start+1:], s)
	p.scratch = s
	return nil
}

// fail returns the error to report for err found at p.pos: the first
// repeated member name of the objects still open, if any (the parser that
// built maps found it when it read the name, before anything after it),
// else err.
func (p *canon) fail(err error) error {
	for i, base := range p.objects {
		end := len(p.members)
		if i+1 < len(p.objects) {
			end = p.objects[i+1]
		}
		if name, ok := p.firstRepeat(p.members[base:end]); ok {
			return badBody("the JSON body repeats the member name %q", name)
		}
	}
	return err
}

// firstRepeat returns the name whose second occurrence comes first in ms.
// It sorts ms.
func (p *canon) firstRepeat(ms []member) (string, bool) {
	slices.SortFunc(ms, p.compareMembers)
	best := -1
	for i := 1; i < len(ms); i++ {
		if bytes.Equal(p.key(ms[i-1]), p.key(ms[i])) && (i == 1 || !bytes.Equal(p.key(ms[i-2]), p.key(ms[i]))) {
			if best < 0 || ms[i].seq < ms[best].seq {
				best = i
			}
		}
	}
	if best < 0 {
		return "", false
	}
	return string(p.key(ms[best])), true
}

func malformed(err error) error { return badBody("malformed JSON body: %v", err) }

// errNUL refuses a string holding U+0000: PostgreSQL's text and jsonb
// cannot store it, so a phase that saves it would fail on every retry.
func errNUL() error {
	return badBody("the body contains a NUL character (\\u0000), which cannot be stored")
}

// The token reader: encoding/json's Decoder.Token, over a byte slice.

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// peek skips white space and returns the next byte.
func (p *canon) peek() (byte, bool) {
	for p.pos < len(p.in) {
		if c := p.in[p.pos]; !isSpace(c) {
			return c, true
		}
		p.pos++
	}
	return 0, false
}

// more reports whether the open array or object has another element.
func (p *canon) more() bool {
	c, ok := p.peek()
	return ok && c != ']' && c != '}'
}

func (p *canon) valueAllowed() bool {
	switch p.state {
	case tokTopValue, tokArrayStart, tokArrayValue, tokObjectValue:
		return true
	}
	return false
}

func (p *canon) valueEnd() {
	switch p.state {
	case tokArrayStart, tokArrayValue:
		p.state = tokArrayComma
	case tokObjectValue:
		p.state = tokObjectComma
	}
}

func (p *canon) token() (tokKind, error) {
	for {
		c, ok := p.peek()
		if !ok {
			return 0, io.EOF
		}
		switch c {
		case '[', '{':
			if !p.valueAllowed() {
				return 0, p.tokenError(c)
			}
			p.pos++
			p.stack = append(p.stack, p.state)
			if c == '[' {
				p.state = tokArrayStart
				return tokBeginArray, nil
			}
			p.state = tokObjectStart
			return tokBeginObject, nil
		case ']', '}':
			if c == ']' && p.state != tokArrayStart && p.state != tokArrayComma ||
				c == '}' && p.state != tokObjectStart && p.state != tokObjectComma {
				return 0, p.tokenError(c)
			}
			p.pos++
			p.state = p.stack[len(p.stack)-1]
			p.stack = p.stack[:len(p.stack)-1]
			p.valueEnd()
			if c == ']' {
				return tokEndArray, nil
			}
			return tokEndObject, nil
		case ':':
			if p.state != tokObjectColon {
				return 0, p.tokenError(c)
			}
			p.pos++
			p.state = tokObjectValue
			continue
		case ',':
			switch p.state {
			case tokArrayComma:
				p.state = tokArrayValue
			case tokObjectComma:
				p.state = tokObjectKey
			default:
				return 0, p.tokenError(c)
			}
			p.pos++
			continue
		case '"':
			if p.state == tokObjectStart || p.state == tokObjectKey {
				t, err := p.scalar()
				if err != nil {
					return 0, err
				}
				p.state = tokObjectColon
				return t, nil
			}
		}
		if !p.valueAllowed() {
			return 0, p.tokenError(c)
		}
		t, err := p.scalar()
		if err != nil {
			return 0, err
		}
		p.valueEnd()
		return t, nil
	}
}

func (p *canon) tokenError(c byte) error {
	var context string
	switch p.state {
	case tokTopValue, tokArrayStart, tokArrayValue, tokObjectValue:
		context = " looking for beginning of value"
	case tokArrayComma:
		context = " after array element"
	case tokObjectKey:
		context = " looking for beginning of object key string"
	case tokObjectColon:
		context = " after object key"
	case tokObjectComma:
		context = " after object key:value pair"
	}
	return errors.New("invalid character " + quoteChar(c) + context)
}

func syntaxError(c byte, context string) error {
	return errors.New("invalid character " + quoteChar(c) + " " + context)
}

func quoteChar(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	s := strconv.Quote(string(rune(c)))
	return "'" + s[1:len(s)-1] + "'"
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// scalar reads the string, number or literal at p.pos into p.lit, as
// encoding/json's scanner does for one value: a literal cut short by the
// end of the body is "unexpected EOF".
func (p *canon) scalar() (tokKind, error) {
	in, i := p.in, p.pos
	next := func() (byte, bool) {
		i++
		if i < len(in) {
			return in[i], true
		}
		return 0, false
	}
	var kind tokKind
	switch c := in[i]; {
	case c == '"':
		p.escaped, p.hasNUL = false, false
		for {
			c, ok := next()
			switch {
			case !ok:
				return 0, io.ErrUnexpectedEOF
			case c == '"':
				i++
				p.lit, p.pos = in[p.pos:i], i
				return tokString, nil
			case c < 0x20:
				return 0, syntaxError(c, "in string literal")
			case c != '\\':
				continue
			}
			p.escaped = true
			c, ok = next()
			switch {
			case !ok:
				return 0, io.ErrUnexpectedEOF
			case c == 'u':
				var r rune
				for range 4 {
					c, ok := next()
					if !ok {
						return 0, io.ErrUnexpectedEOF
					}
					if !isHex(c) {
						return 0, syntaxError(c, "in \\u hexadecimal character escape")
					}
					r = r<<4 | rune(unhex(c))
				}
				p.hasNUL = p.hasNUL || r == 0
			case c == 'b', c == 'f', c == 'n', c == 'r', c == 't', c == '\\', c == '/', c == '"':
			default:
				return 0, syntaxError(c, "in string escape code")
			}
		}
	case c == '-' || isDigit(c):
		if c == '-' {
			if c, ok := next(); !ok {
				return 0, io.ErrUnexpectedEOF
			} else if !isDigit(c) {
				return 0, syntaxError(c, "in numeric literal")
			}
		}
		if in[i] != '0' {
			for i+1 < len(in) && isDigit(in[i+1]) {
				i++
			}
		}
		c, ok := next()
		if ok && c == '.' {
			if c, ok = next(); !ok {
				return 0, io.ErrUnexpectedEOF
			} else if !isDigit(c) {
				return 0, syntaxError(c, "after decimal point in numeric literal")
			}
			for c, ok = next(); ok && isDigit(c); c, ok = next() {
			}
		}
		if ok && (c == 'e' || c == 'E') {
			if c, ok = next(); ok && (c == '+' || c == '-') {
				c, ok = next()
			}
			if !ok {
				return 0, io.ErrUnexpectedEOF
			} else if !isDigit(c) {
				return 0, syntaxError(c, "in exponent of numeric literal")
			}
			for c, ok = next(); ok && isDigit(c); c, ok = next() {
			}
		}
		p.lit, p.pos = in[p.pos:i], i
		return tokNumber, nil
	case c == 't':
		kind = tokTrue
	case c == 'f':
		kind = tokFalse
	case c == 'n':
		kind = tokNull
	default:
		return 0, syntaxError(c, "looking for beginning of value")
	}
	word := [...]string{tokTrue: "true", tokFalse: "false", tokNull: "null"}[kind]
	for k := 1; k < len(word); k++ {
		c, ok := next()
		if !ok {
			return 0, io.ErrUnexpectedEOF
		}
		if c != word[k] {
			return 0, syntaxError(c, "in literal "+word+" (expecting "+quoteChar(word[k])+")")
		}
	}
	i++
	p.lit, p.pos = in[p.pos:i], i
	return kind, nil
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// Writing the canonical form.

// nextRune decodes the character of the JSON string content s (checked by
// scalar) at i, as encoding/json's unquote does: a lone or reversed UTF-16
// surrogate is U+FFFD. It returns the rune and the index after it.
func nextRune(s []byte, i int) (rune, int) {
	c := s[i]
	if c != '\\' {
		if c < utf8.RuneSelf {
			return rune(c), i + 1
		}
		r, size := utf8.DecodeRune(s[i:])
		return r, i + size
	}
	switch c = s[i+1]; c {
	case 'b':
		return '\b', i + 2
	case 'f':
		return '\f', i + 2
	case 'n':
		return '\n', i + 2
	case 'r':
		return '\r', i + 2
	case 't':
		return '\t', i + 2
	case 'u':
	default: // " \ /
		return rune(c), i + 2
	}
	r := hex4(s[i+2:])
	i += 6
	if !utf16.IsSurrogate(r) {
		return r, i
	}
	if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
		if d := utf16.DecodeRune(r, hex4(s[i+2:])); d != utf8.RuneError {
			return d, i + 6
		}
	}
	return utf8.RuneError, i
}

func hex4(s []byte) rune {
	return rune(unhex(s[0]))<<12 | rune(unhex(s[1]))<<8 | rune(unhex(s[2]))<<4 | rune(unhex(s[3]))
}

// appendUnescaped appends the characters of the JSON string content s.
func appendUnescaped(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		var r rune
		r, i = nextRune(s, i)
		dst = utf8.AppendRune(dst, r)
	}
	return dst
}

// appendString appends the canonical form of the JSON string whose content
// (between the quotes) is s: encoding/json's, without HTML escaping. An
// unescaped s is copied but for U+2028 and U+2029.
func appendString(dst, s []byte, escaped bool) []byte {
	dst = append(dst, '"')
	if !escaped {
		// As is, but for U+2028 and U+2029 (e2 80 a8 and e2 80 a9), which
		// encoding/json escapes. s is valid UTF-8: e2 80 has a third byte.
		for {
			i := bytes.Index(s, e280)
			if i < 0 {
				break
			}
			if c := s[i+2]; c == 0xa8 || c == 0xa9 {
				dst = append(dst, s[:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', "89"[c-0xa8])
			} else {
				dst = append(dst, s[:i+3]...)
			}
			s = s[i+3:]
		}
		dst = append(dst, s...)
		return append(dst, '"')
	}
	for i := 0; i < len(s); {
		if c := s[i]; c != '\\' && c >= 0x20 && c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		var r rune
		r, i = nextRune(s, i)
		dst = appendRune(dst, r)
	}
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

var e280 = []byte{0xe2, 0x80}

// appendRune appends r as encoding/json writes it in a string.
func appendRune(dst []byte, r rune) []byte {
	switch {
	case r == '"' || r == '\\':
		return append(dst, '\\', byte(r))
	case r >= 0x20 && r < utf8.RuneSelf:
		return append(dst, byte(r))
	case r == '\b':
		return append(dst, '\\', 'b')
	case r == '\f':
		return append(dst, '\\', 'f')
	case r == '\n':
		return append(dst, '\\', 'n')
	case r == '\r':
		return append(dst, '\\', 'r')
	case r == '\t':
		return append(dst, '\\', 't')
	case r < 0x20:
		return append(dst, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
	case r == '\u2028' || r == '\u2029':
		return append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
	}
	return utf8.AppendRune(dst, r)
}

// appendNumber appends the canonical form of the JSON number lit, so that
// equal values are equal strings: an integer is written as digits ("100");
// anything else as significant digits, "e" and a decimal exponent
// ("15e-1"). Zero is "0", whatever its sign. No precision is lost; a number
// whose exponent is beyond ±2^30 is kept as written.
func appendNumber(dst, lit []byte) []byte {
	m := lit
	neg := m[0] == '-'
	if neg {
		m = m[1:]
	}
	exp := 0
	if e := bytes.IndexAny(m, "eE"); e >= 0 {
		x, ok := exponent(m[e+1:])
		if !ok {
			return append(dst, lit...)
		}
		m, exp = m[:e], x
	}
	intLen := len(m)
	if dot := bytes.IndexByte(m, '.'); dot >= 0 {
		intLen = dot
		exp -= len(m) - dot - 1
	}
	// The significant digits are m without its '.', from the first non-zero
	// digit to the last; the zeros after them go into the exponent.
	first, last := -1, -1
	for i, c := range m {
		if c != '0' && c != '.' {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return append(dst, '0')
	}
	for i := last + 1; i < len(m); i++ {
		if m[i] != '.' {
			exp++
		}
	}
	if neg {
		dst = append(dst, '-')
	}
	if first < intLen && last > intLen {
		dst = append(dst, m[first:intLen]...)
		dst = append(dst, m[intLen+1:last+1]...)
	} else {
		dst = append(dst, m[first:last+1]...)
	}
	if exp >= 0 && exp <= 20 {
		for range exp {
			dst = append(dst, '0')
		}
		return dst
	}
	dst = append(dst, 'e')
	return strconv.AppendInt(dst, int64(exp), 10)
}

// exponent parses a JSON number's exponent ([+-]digits), refusing one
// beyond ±2^30.
func exponent(s []byte) (int, bool) {
	neg := s[0] == '-'
	if s[0] == '-' || s[0] == '+' {
		s = s[1:]
	}
	n := 0
	for _, c := range s {
		if n = n*10 + int(c-'0'); n > 1<<30 {
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	return n, true
}

// memberValue returns the value that the JSON Pointer ptr names in body, a
// JSON text that appendJSON accepted, going through objects only: nil when
// a member is missing or is not an object where the pointer goes on.
func (p *canon) memberValue(body []byte, ptr string) []byte {
	i, off := skipSpace(body, 0), 1
	for {
		tok, next := refToken(ptr, off)
		if body[i] != '{' {
			return nil
		}
		for i = skipSpace(body, i+1); ; {
			if body[i] == '}' {
				return nil
			}
			start := i
			i = skipString(body, i)
			key := body[start+1 : i-1]
			if bytes.IndexByte(key, '\\') >= 0 {
				p.keys = appendUnescaped(p.keys[:0], key)
				key = p.keys
			}
			i = skipSpace(body, skipSpace(body, i)+1) // past the colon
			if idemtype.PointerTokenIs(tok, key) {
				break
			}
			if i = skipSpace(body, skipValue(body, i)); body[i] == ',' {
				i = skipSpace(body, i+1)
			}
		}
		if next < 0 {
			return body[i:skipValue(body, i)]
		}
		off = next
	}
}

func skipSpace(in []byte, i int) int {
	for i < len(in) && isSpace(in[i]) {
		i++
	}
	return i
}

// skipString returns the index after the valid JSON string at in[i].
func skipString(in []byte, i int) int {
	for i++; in[i] != '"'; i++ {
		if in[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// skipValue returns the index after the valid JSON value at in[i].
func skipValue(in []byte, i int) int {
	switch in[i] {
	case '"':
		return skipString(in, i)
	case '{', '[':
		for depth := 0; ; {
			switch in[i] {
			case '"':
				i = skipString(in, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
	}
	for i < len(in) && !isSpace(in[i]) && in[i] != ',' && in[i] != '}' && in[i] != ']' {
		i++
	}
	return i
}
