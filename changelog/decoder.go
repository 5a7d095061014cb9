package changelog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/apache/iceberg-go"
	"github.com/cespare/xxhash/v2"

	"github.com/icesink/icesink/deltawriter"
)

// MaxLineSize is the longest input line a Decoder accepts, in bytes, not
// counting the line terminator.
const MaxLineSize = 64 << 20

const (
	readBufferSize = 64 << 10
	maxSlabRows    = 256 // rows carved from one allocation of row slots, at most
)

// Record is what one input line decodes to.
type Record struct {
	// Line is the 1-based number of the input line. It is also the number
	// of lines consumed so far, so Skip(Line) on a fresh decoder over the
	// same input resumes right after this record.
	Line int64
	// Barrier is set for a {"barrier":true} line; it ends a checkpoint and
	// carries no changes.
	Barrier bool
	// Changes are the line's changes, in order: one, or two for a Debezium
	// update that carries its before image (-U before, then +U after).
	// The slice is reused by the next call to Next; the Change values and
	// their Rows are not, and may be kept.
	Changes []deltawriter.Change
}

// Decoder reads changelog lines from an input and decodes them into
// changes typed by an Iceberg schema. It is not safe for concurrent use.
type Decoder struct {
	br     *bufio.Reader
	format Format
	plan   *plan
	base   []column // plan.cols with the options' encodings
	cols   []column // the columns as the current line spells them
	// schemaRaw is the Kafka Connect schema the columns follow (nil: none).
	schemaRaw []byte
	maxLine   int
	line      int64  // lines consumed
	first     int64  // the stream's lines before the input (WithFirstLine)
	long      []byte // assembles lines longer than the read buffer
	sc        scanner
	tmp       []byte // number digits
	changes   [2]deltawriter.Change
	slab      rowSlab
	seen      []uint32 // per column: stamp of the last row object that set it
	stamp     uint32
	err       error // sticky read error
	head      *headReader
	consumed  int64  // bytes of the lines consumed
	msgKey    []byte // the Kafka record key of the message being decoded
	keyed     bool   // decoding a message that may have a record key
	opts      []Option
	// Evolution (WithEvolution): the line's Connect schema differs from the
	// table's as change says; again is a line to decode again after
	// SetSchema.
	evolve     bool
	change     *SchemaChangeError
	lineSchema bool // the line being decoded has a Connect schema
	again      []byte
}

// identityBytes is how much of the input's head Identity covers.
const identityBytes = 4096

// headReader keeps the first identityBytes bytes read through it.
type headReader struct {
	r    io.Reader
	head []byte
}

func (h *headReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if room := identityBytes - len(h.head); room > 0 {
		h.head = append(h.head, p[:min(n, room)]...)
	}
	return n, err
}

// WithMaxRecordSize sets the longest line or message the decoder accepts,
// in bytes (default MaxLineSize); AvroDecoder.SetMaxRecordSize is its
// Avro counterpart, so one limit holds for every format.
func WithMaxRecordSize(n int) Option {
	return func(d *Decoder) error {
		if n <= 0 {
			return fmt.Errorf("changelog: maximum record size %d: want a positive size", n)
		}
		d.maxLine = n
		return nil
	}
}

// WithFirstLine makes the decoder's input begin after line n of the
// stream (a Journal's replay): its records, errors and Skip count the
// stream's lines.
func WithFirstLine(n int64) Option {
	return func(d *Decoder) error {
		if n < 0 {
			return fmt.Errorf("changelog: first line %d: want 0 or more", n)
		}
		if d.line == 0 { // not again when SetSchema applies the options
			d.line, d.first = n, n
		}
		return nil
	}
}

// NewDecoder returns a decoder of format over r for rows of schema. The
// schema must have identifier fields (the key; every one a required
// top-level primitive column, not float or double) and only primitive
// columns.
func NewDecoder(r io.Reader, format Format, schema *iceberg.Schema, opts ...Option) (*Decoder, error) {
	if format == DebeziumAvro {
		return nil, errors.New("changelog: debezium-avro is read from Kafka with a schema registry (NewAvroDecoder), not from lines")
	}
	if format != ChangelogJSON && format != DebeziumJSON {
		return nil, fmt.Errorf("changelog: unknown input format %v", format)
	}
	p, err := newPlan(schema)
	if err != nil {
		return nil, err
	}
	head := &headReader{r: r}
	d := &Decoder{
		head:    head,
		br:      bufio.NewReaderSize(head, readBufferSize),
		format:  format,
		plan:    p,
		base:    slices.Clone(p.cols),
		maxLine: MaxLineSize,
		seen:    make([]uint32, len(p.cols)),
	}
	d.cols = d.base
	d.opts = opts
	for _, o := range opts {
		if err := o(d); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// SetSchema makes the decoder decode rows of schema from now on (the
// table's schema after it evolved), keeping its options. A line refused
// with a *SchemaChangeError is decoded again by the next call to Next.
func (d *Decoder) SetSchema(schema *iceberg.Schema) error {
	p, err := newPlan(schema)
	if err != nil {
		return err
	}
	d.plan, d.base = p, slices.Clone(p.cols)
	d.cols, d.seen, d.stamp = d.base, make([]uint32, len(p.cols)), 0
	d.schemaRaw, d.change, d.slab = nil, nil, rowSlab{}
	for _, o := range d.opts {
		if err := o(d); err != nil {
			return err
		}
	}
	return nil
}

// Line returns the number of input lines consumed so far (decoded, skipped
// or rejected).
func (d *Decoder) Line() int64 { return d.line }

// Identity fingerprints the input consumed so far: the xxhash64 of its
// first min(4 KiB, bytes consumed) bytes, as "N:HEX". A sink records it with
// each commit; on resume, IdentityOf over the same N bytes of the new input
// tells whether it is the input the commits came from.
func (d *Decoder) Identity() string {
	return d.IdentityOf(int(min(d.consumed, identityBytes)))
}

// IdentityOf is Identity over the first n bytes of the input; "" when
// fewer than n bytes were consumed or n is past 4 KiB.
func (d *Decoder) IdentityOf(n int) string {
	if n < 0 || n > len(d.head.head) || int64(n) > d.consumed {
		return ""
	}
	return strconv.Itoa(n) + ":" + strconv.FormatUint(xxhash.Sum64(d.head.head[:n]), 16)
}

// Next decodes the next record. Empty and whitespace-only lines, and
// Debezium tombstones, are passed over. At the end of the input it returns
// io.EOF. A bad line yields a *LineError; the line is consumed, so calling
// Next again continues with the line after it. Read errors are returned
// wrapped and repeat on every later call.
func (d *Decoder) Next() (Record, error) {
	for {
		var line []byte
		if d.again != nil {
			line, d.again = d.again, nil
		} else {
			var err error
			if line, err = d.readLine(); err != nil {
				return Record{}, err
			}
			if d.line == 1 {
				line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
			}
		}
		rec, skip, err := d.decode(line)
		if err != nil {
			var sc *SchemaChangeError
			if errors.As(err, &sc) {
				d.again = append([]byte(nil), line...)
			}
			return Record{}, d.lineErr(err)
		}
		if skip {
			continue
		}
		rec.Line = d.line
		return rec, nil
	}
}

// decode decodes one line or message; skip reports one that carries no
// record (blank, or a Debezium tombstone).
func (d *Decoder) decode(b []byte) (rec Record, skip bool, err error) {
	d.sc.reset(b)
	d.sc.ws()
	if d.sc.pos == len(b) {
		return Record{}, true, nil
	}
	if d.format == ChangelogJSON {
		rec, err = d.changelogLine()
		return rec, false, err
	}
	return d.debeziumLine()
}

// DecodeMessage decodes one whole message in the decoder's format: a
// Kafka record's value, which may span lines. skip reports a message that
// carries no record (empty, or a Debezium tombstone). A bad message yields
// a *MessageError naming the member at fault; the caller says where the
// message came from. Record.Line is 0, and the decoder's line count does
// not move. Record.Changes is reused by the next call, as with Next.
func (d *Decoder) DecodeMessage(msg []byte) (rec Record, skip bool, err error) {
	return d.DecodeKeyedMessage(nil, msg)
}

// DecodeKeyedMessage is DecodeMessage for a message that came with a
// record key (a Kafka record's key). In debezium-json, a delete whose
// before image is null (a connector that sends only the key) deletes the
// row the key names: the key is a JSON object of the key columns, as
// Debezium writes it, or such an object in the payload member of a
// schema envelope. Errors in the key name the field "key".
func (d *Decoder) DecodeKeyedMessage(key, msg []byte) (rec Record, skip bool, err error) {
	d.msgKey, d.keyed = key, true
	defer func() { d.msgKey, d.keyed = nil, false }()
	if len(msg) > d.maxLine {
		return Record{}, false, &MessageError{Err: kindErrf(ErrLineTooLong, "message longer than %d bytes", d.maxLine)}
	}
	rec, skip, err = d.decode(msg)
	if err != nil {
		return Record{}, false, messageError(err)
	}
	return rec, skip, nil
}

// messageError is a decode error of a message as DecodeKeyedMessage
// returns it: a *MessageError naming the member at fault, except for what
// is not the message's fault (a *SchemaChangeError, a schema registry
// that cannot answer), returned as it is.
func messageError(err error) error {
	var fe *fieldError
	var me *MessageError
	var sc *SchemaChangeError
	switch {
	case errors.As(err, &sc):
		return sc
	case errors.Is(err, errRegistry), errors.As(err, &me):
		return err
	case errors.As(err, &fe):
		return &MessageError{Field: fe.field, Err: fe.err}
	}
	return &MessageError{Err: err}
}

// Skip consumes the input up to line n of the stream (the next n lines
// without WithFirstLine) without decoding them, only counting line
// terminators; a final line without a terminator counts as a line. If the
// input has fewer than n more lines, Skip consumes them all and returns an
// error wrapping io.ErrUnexpectedEOF.
func (d *Decoder) Skip(n int64) error {
	if d.err != nil {
		return d.err
	}
	if n < d.first {
		return fmt.Errorf("changelog: cannot resume after line %d: the input begins after line %d", n, d.first)
	}
	n -= d.first
	want := n
	partial := false // consumed bytes of a line whose terminator is not yet seen
	for n > 0 {
		if _, err := d.br.Peek(1); err != nil {
			if err != io.EOF {
				d.err = fmt.Errorf("changelog: reading line %d: %w", d.line+1, err)
				return d.err
			}
			if partial {
				d.line++
				n--
			}
			if n > 0 {
				return fmt.Errorf("changelog: cannot skip %d lines: the input ends after %d of them: %w", want, want-n, io.ErrUnexpectedEOF)
			}
			return nil
		}
		buf, _ := d.br.Peek(d.br.Buffered())
		i := 0
		for n > 0 {
			j := bytes.IndexByte(buf[i:], '\n')
			if j < 0 {
				break
			}
			i += j + 1
			n--
			d.line++
		}
		if n == 0 {
			_, _ = d.br.Discard(i)
			d.consumed += int64(i)
			return nil
		}
		partial = buf[len(buf)-1] != '\n'
		_, _ = d.br.Discard(len(buf))
		d.consumed += int64(len(buf))
	}
	return nil
}

// readLine returns the next line without its '\n', valid until the next
// call, and counts it.
func (d *Decoder) readLine() ([]byte, error) {
	if d.err != nil {
		return nil, d.err
	}
	b, err := d.br.ReadSlice('\n')
	d.consumed += int64(len(b))
	switch err {
	case nil:
		d.line++
		b = b[:len(b)-1]
		if len(b) > d.maxLine {
			return nil, d.tooLong()
		}
		return b, nil
	case io.EOF:
		if len(b) == 0 {
			return nil, io.EOF
		}
		d.line++
		if len(b) > d.maxLine {
			return nil, d.tooLong()
		}
		return b, nil
	case bufio.ErrBufferFull:
		return d.readLongLine(b)
	}
	d.err = fmt.Errorf("changelog: reading line %d: %w", d.line+1, err)
	return nil, d.err
}

// readLongLine finishes reading a line that does not fit the read buffer.
func (d *Decoder) readLongLine(b []byte) ([]byte, error) {
	d.long = append(d.long[:0], b...)
	over := len(d.long) > d.maxLine
	for {
		b, err := d.br.ReadSlice('\n')
		d.consumed += int64(len(b))
		if !over {
			d.long = append(d.long, b...)
			over = len(d.long) > d.maxLine+1 // +1: the '\n'
		}
		switch err {
		case bufio.ErrBufferFull:
			continue
		case nil, io.EOF:
			d.line++
			line := d.long
			if err == nil {
				line = line[:len(line)-1]
			}
			if over || len(line) > d.maxLine {
				return nil, d.tooLong()
			}
			return line, nil
		}
		d.err = fmt.Errorf("changelog: reading line %d: %w", d.line+1, err)
		return nil, d.err
	}
}

func (d *Decoder) tooLong() error {
	return &LineError{Line: d.line, Err: kindErrf(ErrLineTooLong, "line longer than %d bytes", d.maxLine)}
}

func (d *Decoder) lineErr(err error) error {
	var fe *fieldError
	if errors.As(err, &fe) {
		return &LineError{Line: d.line, Field: fe.field, Err: fe.err}
	}
	return &LineError{Line: d.line, Err: err}
}

// parseOp parses a changelog op without allocating.
func parseOp(b []byte) (deltawriter.Op, bool) {
	if len(b) != 2 {
		return 0, false
	}
	switch {
	case b[0] == '+' && b[1] == 'I':
		return deltawriter.Insert, true
	case b[0] == '-' && b[1] == 'U':
		return deltawriter.UpdateBefore, true
	case b[0] == '+' && b[1] == 'U':
		return deltawriter.UpdateAfter, true
	case b[0] == '-' && b[1] == 'D':
		return deltawriter.Delete, true
	}
	return 0, false
}

func duplicate(field string) error {
	return fieldErr(field, kindErr(ErrDuplicateKey, "member appears twice"))
}

// boolMember reads a boolean member value.
func (d *Decoder) boolMember(field string) (bool, error) {
	s := &d.sc
	switch s.peek() {
	case 't':
		return true, s.literal("true")
	case 'f':
		return false, s.literal("false")
	}
	if err := s.skip(1); err != nil {
		return false, err
	}
	return false, fieldErr(field, kindErr(ErrRecord, "must be true or false"))
}

// changelogLine decodes {"op":...,"data":{...}} or {"barrier":true}.
// Members other than op, data and barrier are ignored.
func (d *Decoder) changelogLine() (Record, error) {
	s := &d.sc
	if c := s.peek(); c != '{' {
		if err := s.skip(0); err != nil {
			return Record{}, err
		}
		return Record{}, kindErrf(ErrRecord, "a changelog-json line must be a JSON object, got %s", jsonKind(c))
	}
	var (
		op                        deltawriter.Op
		haveOp, haveData, haveBar bool
		barrier                   bool
		row                       []any
		stamp                     uint32
	)
	empty, err := s.beginObject()
	if err != nil {
		return Record{}, err
	}
	for !empty {
		k, err := s.key()
		if err != nil {
			return Record{}, err
		}
		switch string(k) {
		case "op":
			if haveOp {
				return Record{}, duplicate("op")
			}
			haveOp = true
			if s.peek() != '"' {
				c := s.peek()
				if err := s.skip(1); err != nil {
					return Record{}, err
				}
				return Record{}, fieldErr("op", kindErrf(ErrUnknownOp, "op must be one of the strings +I, -U, +U, -D, got %s", jsonKind(c)))
			}
			v, err := s.str()
			if err != nil {
				return Record{}, err
			}
			var ok bool
			if op, ok = parseOp(v); !ok {
				return Record{}, fieldErr("op", kindErrf(ErrUnknownOp, "unknown op %s (want +I, -U, +U or -D)", quoteShort(v)))
			}
		case "data":
			if haveData {
				return Record{}, duplicate("data")
			}
			haveData = true
			if row, stamp, err = d.row("data", ""); err != nil {
				return Record{}, err
			}
		case "barrier":
			if haveBar {
				return Record{}, duplicate("barrier")
			}
			haveBar = true
			if barrier, err = d.boolMember("barrier"); err != nil {
				return Record{}, err
			}
		default:
			if err := s.skip(1); err != nil {
				return Record{}, err
			}
		}
		more, err := s.next()
		if err != nil {
			return Record{}, err
		}
		if !more {
			break
		}
	}
	if err := s.end(); err != nil {
		return Record{}, err
	}
	if barrier {
		if haveOp || haveData {
			return Record{}, fieldErr("barrier", kindErr(ErrRecord, "a barrier line carries no op or data"))
		}
		return Record{Barrier: true}, nil
	}
	if !haveOp {
		return Record{}, fieldErr("op", kindErr(ErrRecord, "missing op"))
	}
	if !haveData {
		return Record{}, fieldErr("data", kindErr(ErrRecord, "missing data"))
	}
	if err := d.check(row, stamp, !op.IsDelete(), ""); err != nil {
		return Record{}, err
	}
	d.changes[0] = deltawriter.Change{Op: op, Row: row}
	return Record{Changes: d.changes[:1]}, nil
}

// envelope is what one Debezium envelope object held.
type envelope struct {
	op                    byte // 'c', 'r', 'u', 'd', 't'; 0 when absent
	haveBefore, haveAfter bool
	before, after         []any // nil when null
	havePayload, nullPay  bool
	barrier, haveBarrier  bool
	haveSchema, schema    bool // a schema member; a non-null one
	redo                  bool // decode the line again: the schema came after rows
}

// debeziumLine decodes one Debezium event line; skip reports a tombstone.
func (d *Decoder) debeziumLine() (rec Record, skip bool, err error) {
	s := &d.sc
	switch s.peek() {
	case 'n': // a Kafka tombstone
		if err := s.literal("null"); err != nil {
			return Record{}, false, err
		}
		if err := s.end(); err != nil {
			return Record{}, false, err
		}
		return Record{}, true, nil
	case '{':
	default:
		c := s.peek()
		if err := s.skip(0); err != nil {
			return Record{}, false, err
		}
		return Record{}, false, kindErrf(ErrRecord, "a debezium-json line must be a JSON object or null, got %s", jsonKind(c))
	}
	start := s.pos
	var top, pay envelope
	d.lineSchema = false
	err = d.envelope(&top, &pay)
	if err != nil && !top.haveSchema && bytes.Contains(s.buf[start:], []byte(`"schema"`)) {
		// A row may have failed for want of a schema further on: decode
		// the line again if it has one that changes the spellings.
		if changed, ferr := d.laterSchema(start); ferr == nil && changed {
			s.pos = start
			top, pay = envelope{}, envelope{}
			err = d.envelope(&top, &pay)
		}
	}
	if d.evolve && d.lineSchema && d.change != nil {
		return Record{}, false, d.change
	}
	if err != nil {
		return Record{}, false, err
	}
	if err := s.end(); err != nil {
		return Record{}, false, err
	}
	if !top.schema && d.dropSchema() || top.redo {
		s.pos = start
		top, pay = envelope{}, envelope{}
		if err := d.envelope(&top, &pay); err != nil {
			return Record{}, false, err
		}
	}
	if top.barrier {
		if top.op != 0 || top.haveBefore || top.haveAfter || top.havePayload {
			return Record{}, false, fieldErr("barrier", kindErr(ErrRecord, "a barrier line carries no event"))
		}
		return Record{Barrier: true}, false, nil
	}
	e := &top
	if top.havePayload {
		if top.op != 0 || top.haveBefore || top.haveAfter {
			return Record{}, false, fieldErr("payload", kindErr(ErrRecord, "op, before or after both inside and outside payload"))
		}
		if top.nullPay {
			return Record{}, true, nil // a tombstone with a schema
		}
		e = &pay
	}
	var keyRow func() ([]any, error)
	if len(d.msgKey) > 0 {
		keyRow = func() ([]any, error) { return d.keyRow(d.msgKey) }
	}
	rec, err = eventChanges(&d.changes, e.op, e.before, e.after, keyRow, d.keyed)
	return rec, false, err
}

// eventChanges turns a Debezium event (its op and images) into its
// changes, held in changes: c and r insert after, u updates (with its
// before image when given), d deletes before. keyRow, when set, gives the
// delete image of a d without a before image from the record key; keyed
// says a record key could have given one (for the message).
func eventChanges(changes *[2]deltawriter.Change, op byte, before, after []any, keyRow func() ([]any, error), keyed bool) (Record, error) {
	switch op {
	case 0:
		return Record{}, fieldErr("op", kindErr(ErrRecord, "missing op"))
	case 'c', 'r':
		if after == nil {
			return Record{}, fieldErr("after", kindErrf(ErrRecord, "op %q needs a non-null after", op))
		}
		changes[0] = deltawriter.Change{Op: deltawriter.Insert, Row: after}
		return Record{Changes: changes[:1]}, nil
	case 'u':
		if after == nil {
			return Record{}, fieldErr("after", kindErr(ErrRecord, `op "u" needs a non-null after`))
		}
		if before == nil {
			changes[0] = deltawriter.Change{Op: deltawriter.UpdateAfter, Row: after}
			return Record{Changes: changes[:1]}, nil
		}
		changes[0] = deltawriter.Change{Op: deltawriter.UpdateBefore, Row: before}
		changes[1] = deltawriter.Change{Op: deltawriter.UpdateAfter, Row: after}
		return Record{Changes: changes[:2]}, nil
	case 'd':
		if before == nil && keyRow != nil {
			row, err := keyRow()
			if err != nil {
				return Record{}, err
			}
			before = row
		}
		if before == nil {
			if keyed {
				return Record{}, fieldErr("before", kindErr(ErrRecord, `op "d" needs a non-null before, or a record key`))
			}
			return Record{}, fieldErr("before", kindErr(ErrRecord, `op "d" needs a non-null before`))
		}
		changes[0] = deltawriter.Change{Op: deltawriter.Delete, Row: before}
		return Record{Changes: changes[:1]}, nil
	}
	// 't'
	return Record{}, fieldErr("op", kindErr(ErrUnsupported, `truncate events (op "t") are not supported`))
}

// keyRow decodes a record key into a delete image: an object of the key
// columns, or a schema envelope whose payload is one.
func (d *Decoder) keyRow(key []byte) ([]any, error) {
	obj := key
	var env map[string]json.RawMessage
	if json.Unmarshal(key, &env) == nil && len(env) == 2 && env["payload"] != nil && env["schema"] != nil {
		if _, col := d.plan.byName["payload"]; !col {
			obj = env["payload"]
		}
	}
	saved := d.sc
	defer func() { d.sc = saved }()
	d.sc.reset(obj)
	d.sc.ws()
	row, stamp, err := d.row("key", "key")
	if err == nil {
		err = d.sc.end()
	}
	if err == nil && row == nil {
		err = kindErr(ErrRecord, "the record key is null")
	}
	if err == nil {
		err = d.check(row, stamp, false, "key")
	}
	if err != nil {
		var fe *fieldError
		if errors.As(err, &fe) {
			return nil, err // a column, "in key"
		}
		return nil, fieldErr("key", err)
	}
	return row, nil
}

// envelope decodes a Debezium envelope object into e. At the top level
// (pay != nil) a "payload" member is decoded into pay and "barrier" is
// recognized. Unknown members (schema, source, ts_ms, transaction, ...)
// are validated and ignored.
func (d *Decoder) envelope(e, pay *envelope) error {
	s := &d.sc
	empty, err := s.beginObject()
	if err != nil {
		return err
	}
	for !empty {
		k, err := s.key()
		if err != nil {
			return err
		}
		switch {
		case string(k) == "op":
			if e.op != 0 {
				return duplicate("op")
			}
			c := s.peek()
			if c != '"' {
				if err := s.skip(1); err != nil {
					return err
				}
				return fieldErr("op", kindErrf(ErrUnknownOp, "op must be one of the strings c, r, u, d, got %s", jsonKind(c)))
			}
			v, err := s.str()
			if err != nil {
				return err
			}
			if len(v) != 1 || bytes.IndexByte([]byte("crudt"), v[0]) < 0 {
				return fieldErr("op", kindErrf(ErrUnknownOp, "unknown op %s (want c, r, u or d)", quoteShort(v)))
			}
			e.op = v[0]
		case string(k) == "before":
			if e.haveBefore {
				return duplicate("before")
			}
			e.haveBefore = true
			row, stamp, err := d.row("before", "before")
			if err != nil {
				return err
			}
			if row != nil {
				if err := d.check(row, stamp, false, "before"); err != nil {
					return err
				}
			}
			e.before = row
		case string(k) == "after":
			if e.haveAfter {
				return duplicate("after")
			}
			e.haveAfter = true
			row, stamp, err := d.row("after", "after")
			if err != nil {
				return err
			}
			if row != nil {
				if err := d.check(row, stamp, true, "after"); err != nil {
					return err
				}
			}
			e.after = row
		case pay != nil && string(k) == "payload":
			if e.havePayload {
				return duplicate("payload")
			}
			e.havePayload = true
			switch s.peek() {
			case 'n':
				if err := s.literal("null"); err != nil {
					return err
				}
				e.nullPay = true
			case '{':
				if err := d.envelope(pay, nil); err != nil {
					return err
				}
			default:
				c := s.peek()
				if err := s.skip(1); err != nil {
					return err
				}
				return fieldErr("payload", kindErrf(ErrRecord, "payload must be an object or null, got %s", jsonKind(c)))
			}
		case pay != nil && string(k) == "schema":
			if e.haveSchema {
				return duplicate("schema")
			}
			e.haveSchema = true
			s.ws()
			start := s.pos
			if err := s.skip(1); err != nil {
				return err
			}
			if s.buf[start] != 'n' {
				changed, err := d.useSchema(s.buf[start:s.pos])
				if err != nil {
					return err
				}
				// Rows decoded before the schema was seen used the old
				// spellings: the line is decoded again.
				e.redo = changed && (e.havePayload || e.haveBefore || e.haveAfter)
				e.schema = true
			}
		case pay != nil && string(k) == "barrier":
			if e.haveBarrier {
				return duplicate("barrier")
			}
			e.haveBarrier = true
			if e.barrier, err = d.boolMember("barrier"); err != nil {
				return err
			}
		default:
			if err := s.skip(1); err != nil {
				return err
			}
		}
		more, err := s.next()
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
	return nil
}

// row decodes a row object (or null, giving a nil row) at the cursor.
// member names the JSON member holding it, for errors; where, when not
// empty, names the Debezium image in column errors. It returns the stamp
// that marks the columns the object set, for check.
func (d *Decoder) row(member, where string) ([]any, uint32, error) {
	s := &d.sc
	switch c := s.peek(); c {
	case '{':
	case 'n':
		if err := s.literal("null"); err != nil {
			return nil, 0, err
		}
		if where == "" {
			return nil, 0, fieldErr(member, kindErr(ErrRecord, "data is null"))
		}
		return nil, 0, nil
	default:
		if err := s.skip(1); err != nil {
			return nil, 0, err
		}
		return nil, 0, fieldErr(member, kindErrf(ErrRecord, "must be an object, got %s", jsonKind(c)))
	}
	d.stamp++
	if d.stamp == 0 {
		clear(d.seen)
		d.stamp = 1
	}
	stamp := d.stamp
	cols := d.cols
	row := d.newRow()
	empty, err := s.beginObject()
	if err != nil {
		return nil, 0, err
	}
	hint := 0
	for !empty {
		k, err := s.key()
		if err != nil {
			return nil, 0, err
		}
		i := -1
		if hint < len(cols) && cols[hint].name == string(k) {
			i = hint
		} else if j, ok := d.plan.byName[string(k)]; ok {
			i = j
		} else {
			return nil, 0, fieldErr(string(k), in(where, kindErr(ErrUnknownColumn, "no such column in the table schema")))
		}
		if d.seen[i] == stamp {
			return nil, 0, fieldErr(cols[i].name, in(where, kindErr(ErrDuplicateKey, "column appears twice")))
		}
		d.seen[i] = stamp
		v, err := s.value(&cols[i], &d.tmp)
		if err != nil {
			return nil, 0, fieldErr(cols[i].name, in(where, err))
		}
		row[i] = v
		hint = i + 1
		more, err := s.next()
		if err != nil {
			return nil, 0, err
		}
		if !more {
			break
		}
	}
	return row, stamp, nil
}

// in prefixes err with the Debezium image it was found in.
func in(where string, err error) error {
	if where == "" {
		return err
	}
	return fmt.Errorf("in %s: %w", where, err)
}

// check enforces the null rules on a decoded row: key columns are always
// required; full (an insert or update image) requires every required column.
func (d *Decoder) check(row []any, stamp uint32, full bool, where string) error {
	return checkNulls(d.plan.cols, row, full, where, func(i int) bool { return d.seen[i] == stamp })
}

// checkNulls enforces the null rules on row; present(i) says whether the
// input spelled column i (null) rather than left it out (missing).
func checkNulls(cols []column, row []any, full bool, where string, present func(i int) bool) error {
	for i := range cols {
		if row[i] != nil {
			continue
		}
		c := &cols[i]
		what := ""
		switch {
		case c.key:
			what = "key column"
		case full && c.required:
			what = "required column"
		default:
			continue
		}
		if present(i) {
			return fieldErr(c.name, in(where, kindErrf(ErrNull, "%s is null", what)))
		}
		return fieldErr(c.name, in(where, kindErrf(ErrNull, "%s is missing", what)))
	}
	return nil
}

// newRow returns a fresh row of nils, carved from a shared allocation.
func (d *Decoder) newRow() []any { return d.slab.next(len(d.plan.cols)) }

// rowSlab carves rows from shared allocations of row slots.
type rowSlab struct {
	free []any // unused slots
	rows int   // rows in the last allocation
}

// next returns a fresh row of n nils.
func (s *rowSlab) next(n int) []any {
	if len(s.free) < n {
		// Start small (a decoder may see few rows) and grow to maxSlabRows.
		s.rows = min(max(2*s.rows, 8), maxSlabRows)
		s.free = make([]any, n*s.rows)
	}
	r := s.free[:n:n]
	s.free = s.free[n:]
	return r
}
