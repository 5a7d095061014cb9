package changelog

import (
	"fmt"
	"unicode/utf8"
)

// maxDepth bounds the nesting of JSON values the scanner walks through
// (ignored envelope fields such as Debezium's "schema" and "source").
const maxDepth = 512

// strSafe marks the bytes that may appear unescaped inside a JSON string and
// need no further look: printable ASCII other than '"' and '\\'.
var strSafe = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanner is a strict RFC 8259 scanner over one input line. It never
// allocates on the success path: strings without escapes are returned as
// sub-slices of the line, escaped ones are unescaped into a reused buffer.
type scanner struct {
	buf     []byte
	pos     int
	scratch []byte // unescaped string contents; valid until the next str call
}

func (s *scanner) reset(line []byte) {
	s.buf = line
	s.pos = 0
}

// ws skips JSON whitespace.
func (s *scanner) ws() {
	for s.pos < len(s.buf) {
		switch s.buf[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the byte at the cursor, or 0 at the end of the line.
func (s *scanner) peek() byte {
	if s.pos < len(s.buf) {
		return s.buf[s.pos]
	}
	return 0
}

func (s *scanner) syntaxErr(format string, args ...any) error {
	return kindErr(ErrSyntax, fmt.Sprintf("malformed JSON at byte %d: ", s.pos+1)+fmt.Sprintf(format, args...))
}

// unexpected reports the byte at the cursor as not what was expected.
func (s *scanner) unexpected(want string) error {
	if s.pos >= len(s.buf) {
		return s.syntaxErr("unexpected end of line, expected %s", want)
	}
	return s.syntaxErr("unexpected %q, expected %s", s.buf[s.pos], want)
}

// beginObject consumes '{' and reports whether the object is empty (in which
// case the closing '}' is consumed too).
func (s *scanner) beginObject() (empty bool, err error) {
	if s.peek() != '{' {
		return false, s.unexpected("'{'")
	}
	s.pos++
	s.ws()
	if s.peek() == '}' {
		s.pos++
		return true, nil
	}
	return false, nil
}

// key reads an object member name and the ':' after it, leaving the cursor
// at the value. The returned slice is valid until the next str call.
func (s *scanner) key() ([]byte, error) {
	if s.peek() != '"' {
		return nil, s.unexpected("a member name")
	}
	k, err := s.str()
	if err != nil {
		return nil, err
	}
	s.ws()
	if s.peek() != ':' {
		return nil, s.unexpected("':'")
	}
	s.pos++
	s.ws()
	return k, nil
}

// next is called after a member value: it consumes ',' (returning true, with
// the cursor at the next member name) or '}' (returning false).
func (s *scanner) next() (bool, error) {
	s.ws()
	switch s.peek() {
	case ',':
		s.pos++
		s.ws()
		return true, nil
	case '}':
		s.pos++
		return false, nil
	}
	return false, s.unexpected("',' or '}'")
}

// end checks that only whitespace follows.
func (s *scanner) end() error {
	s.ws()
	if s.pos < len(s.buf) {
		return s.syntaxErr("unexpected %q after the top-level value", s.buf[s.pos])
	}
	return nil
}

// literal consumes the literal word (true, false, null).
func (s *scanner) literal(word string) error {
	if len(s.buf)-s.pos >= len(word) && string(s.buf[s.pos:s.pos+len(word)]) == word {
		s.pos += len(word)
		return nil
	}
	return s.unexpected("a JSON value")
}

// str reads a JSON string at the cursor (which is at '"') and returns its
// unescaped contents. The contents are checked to be valid UTF-8 (lone
// surrogate escapes are rejected too). The result aliases the line or the
// scratch buffer and is valid until the next call.
func (s *scanner) str() ([]byte, error) {
	b := s.buf
	start := s.pos + 1
	i := start
	for i < len(b) {
		c := b[i]
		if strSafe[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			s.pos = i + 1
			return b[start:i], nil
		case c == '\\':
			return s.strSlow(start, i)
		case c < 0x20:
			s.pos = i
			return nil, s.syntaxErr("control character %q in a string", c)
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				s.pos = i
				return nil, kindErr(ErrSyntax, fmt.Sprintf("invalid UTF-8 at byte %d", i+1))
			}
			i += size
		}
	}
	s.pos = i
	return nil, s.syntaxErr("unterminated string")
}

// strSlow continues str from the first backslash at i, unescaping into the
// scratch buffer.
func (s *scanner) strSlow(start, i int) ([]byte, error) {
	b := s.buf
	out := append(s.scratch[:0], b[start:i]...)
	for i < len(b) {
		c := b[i]
		if strSafe[c] {
			out = append(out, c)
			i++
			continue
		}
		switch {
		case c == '"':
			s.pos = i + 1
			s.scratch = out
			return out, nil
		case c == '\\':
			if i+1 >= len(b) {
				s.pos = i
				return nil, s.syntaxErr("unterminated string")
			}
			e := b[i+1]
			i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hex4(b, i)
				if !ok {
					s.pos = i - 2
					return nil, s.syntaxErr("invalid \\u escape")
				}
				i += 4
				if r >= 0xD800 && r < 0xDC00 {
					// A high surrogate must be followed by an escaped low one.
					lo, ok := rune(0), false
					if i+1 < len(b) && b[i] == '\\' && b[i+1] == 'u' {
						lo, ok = hex4(b, i+2)
					}
					if !ok || lo < 0xDC00 || lo >= 0xE000 {
						s.pos = i - 6
						return nil, kindErr(ErrSyntax, fmt.Sprintf("unpaired UTF-16 surrogate \\u%04X at byte %d", r, i-5))
					}
					i += 6
					r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				} else if r >= 0xDC00 && r < 0xE000 {
					s.pos = i - 6
					return nil, kindErr(ErrSyntax, fmt.Sprintf("unpaired UTF-16 surrogate \\u%04X at byte %d", r, i-5))
				}
				out = utf8.AppendRune(out, r)
			default:
				s.pos = i - 2
				return nil, s.syntaxErr("invalid escape '\\%c'", e)
			}
		case c < 0x20:
			s.pos = i
			return nil, s.syntaxErr("control character %q in a string", c)
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				s.pos = i
				return nil, kindErr(ErrSyntax, fmt.Sprintf("invalid UTF-8 at byte %d", i+1))
			}
			out = append(out, b[i:i+size]...)
			i += size
		}
	}
	s.pos = i
	s.scratch = out
	return nil, s.syntaxErr("unterminated string")
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number scans a JSON number at the cursor and splits it into parts.
func (s *scanner) number() (number, error) {
	n, end, msg := parseNumber(s.buf, s.pos)
	if msg != "" {
		s.pos = end
		return n, s.syntaxErr("%s", msg)
	}
	s.pos = end
	return n, nil
}

// skip walks over (and validates) any JSON value at the cursor.
func (s *scanner) skip(depth int) error {
	switch c := s.peek(); c {
	case '"':
		_, err := s.str()
		return err
	case '{':
		if depth >= maxDepth {
			return s.syntaxErr("nesting deeper than %d", maxDepth)
		}
		empty, err := s.beginObject()
		if err != nil || empty {
			return err
		}
		for {
			if _, err := s.key(); err != nil {
				return err
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
			more, err := s.next()
			if err != nil || !more {
				return err
			}
		}
	case '[':
		if depth >= maxDepth {
			return s.syntaxErr("nesting deeper than %d", maxDepth)
		}
		s.pos++
		s.ws()
		if s.peek() == ']' {
			s.pos++
			return nil
		}
		for {
			if err := s.skip(depth + 1); err != nil {
				return err
			}
			s.ws()
			switch s.peek() {
			case ',':
				s.pos++
				s.ws()
			case ']':
				s.pos++
				return nil
			default:
				return s.unexpected("',' or ']'")
			}
		}
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		_, err := s.number()
		return err
	}
}

// number is a JSON number split into its parts: the value is
// (-1 if neg) * intPart.frac * 10^exp. exp saturates at ±maxExp.
type number struct {
	neg     bool
	intPart []byte // digits before the point (JSON forbids leading zeros there)
	frac    []byte // digits after the point, possibly empty
	exp     int64
}

const maxExp = 1 << 40

// parseNumber parses the JSON number grammar
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? starting at b[i]. It returns
// the number, the index after it and, on failure, a message.
func parseNumber(b []byte, i int) (n number, end int, msg string) {
	if i < len(b) && b[i] == '-' {
		n.neg = true
		i++
	}
	start := i
	switch {
	case i < len(b) && b[i] == '0':
		i++
		if i < len(b) && b[i] >= '0' && b[i] <= '9' {
			return n, i, "leading zero in a number"
		}
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		if i >= len(b) {
			return n, i, "unexpected end of line, expected a JSON value"
		}
		return n, i, fmt.Sprintf("unexpected %q, expected a JSON value", b[i])
	}
	n.intPart = b[start:i]
	if i < len(b) && b[i] == '.' {
		i++
		fs := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == fs {
			return n, i, "no digits after the decimal point"
		}
		n.frac = b[fs:i]
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		es := i
		var e int64
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if e < maxExp {
				e = e*10 + int64(b[i]-'0')
			}
			i++
		}
		if i == es {
			return n, i, "no digits in the exponent"
		}
		e = min(e, maxExp)
		if eneg {
			e = -e
		}
		n.exp = e
	}
	return n, i, ""
}
