package changelog

import (
	"errors"
	"fmt"
	"strconv"
)

// Categories of bad input. Every error a Decoder returns for a bad line is a
// *LineError whose Err matches exactly one of these with errors.Is.
var (
	ErrSyntax        = errors.New("malformed JSON")                         // not RFC 8259 JSON, or not UTF-8
	ErrRecord        = errors.New("malformed record")                       // valid JSON of the wrong shape: missing "op" or "data", a barrier with data, ...
	ErrUnknownOp     = errors.New("unknown op")                             // an op the format does not define
	ErrUnknownColumn = errors.New("unknown column")                         // a data member that names no column of the schema
	ErrDuplicateKey  = errors.New("duplicate member")                       // the same member name twice in one object
	ErrType          = errors.New("wrong type")                             // a JSON value that cannot be the column's type
	ErrRange         = errors.New("value out of range")                     // a value of the right kind that does not fit the column
	ErrNull          = errors.New("null or missing value")                  // a null or absent key column, or null in a required column
	ErrUnsupported   = errors.New("not supported")                          // valid input icesink cannot apply (Debezium truncate)
	ErrLineTooLong   = errors.New("line longer than the maximum line size") // see MaxLineSize
)

// LineError is a bad input line: the 1-based line number, the member the
// problem is in (a column name, or a top-level member such as "op"; empty
// when the whole line is at fault) and the reason. Its message reads
// `line N: field "name": reason`.
type LineError struct {
	Line  int64
	Field string
	Err   error
}

// Error returns `line N: field "name": reason`, or `line N: reason` when
// Field is empty.
func (e *LineError) Error() string {
	if e.Field == "" {
		return "line " + strconv.FormatInt(e.Line, 10) + ": " + e.Err.Error()
	}
	return "line " + strconv.FormatInt(e.Line, 10) + ": field " + strconv.Quote(e.Field) + ": " + e.Err.Error()
}

// Unwrap returns the reason, which matches one of the Err* categories.
func (e *LineError) Unwrap() error { return e.Err }

// MessageError is a bad message given to Decoder.DecodeMessage: the member
// the problem is in (empty when the whole message is at fault) and the
// reason. Its message reads `field "name": reason`; the caller prefixes
// where the message came from (a topic, partition and offset).
type MessageError struct {
	Field string
	Err   error
}

// Error returns `field "name": reason`, or the reason when Field is empty.
func (e *MessageError) Error() string {
	if e.Field == "" {
		return e.Err.Error()
	}
	return "field " + strconv.Quote(e.Field) + ": " + e.Err.Error()
}

// Unwrap returns the reason, which matches one of the Err* categories.
func (e *MessageError) Unwrap() error { return e.Err }

// kindError is a reason whose message is just the detail while errors.Is
// still finds its category.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

func kindErr(kind error, msg string) error { return &kindError{kind: kind, msg: msg} }

func kindErrf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// fieldError is a reason tied to a member; the decoder turns it into a
// LineError with that Field.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return strconv.Quote(e.field) + ": " + e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

func fieldErr(field string, err error) error { return &fieldError{field: field, err: err} }
