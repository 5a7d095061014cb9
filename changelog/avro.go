package changelog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/icesink/icesink/deltawriter"
)

// Schemas looks up the writer schemas of a schema registry by id
// (kafka.Registry is one). An id the registry does not have is an error
// matching ErrUnknownSchema, one it has but in a kind icesink cannot read
// an error matching ErrUnsupportedSchema; any other error is the registry's, not the
// message's, and stops the decoding of that message without blaming it.
type Schemas interface {
	Schema(ctx context.Context, id int) (string, error)
}

// ErrUnknownSchema is a message that names a schema id its registry does
// not have.
var ErrUnknownSchema = errors.New("unknown schema id")

// ErrUnsupportedSchema is a message whose schema id names a schema the
// registry has but icesink cannot read (not Avro, or Avro with references
// to other subjects): a bad message, not an outage.
var ErrUnsupportedSchema = errors.New("unsupported schema")

// lookupTimeout bounds one schema lookup; a registry slower than this is
// treated as unreachable.
const lookupTimeout = 30 * time.Second

// AvroDecoder decodes Debezium change events serialized with Avro in the
// schema registry's wire format (a zero byte, the schema id as 4 bytes
// big-endian, then the Avro binary encoding) into changes typed by an
// Iceberg schema. Values decode exactly as their debezium-json spelling
// does: Kafka Connect and Debezium logical types (connect.name) and Avro
// logical types say the unit of times and timestamps and the scale of
// decimal bytes. A schema id seen for the first time is looked up in the
// registry, parsed by hamba/avro and kept. It is not safe for concurrent use.
type AvroDecoder struct {
	plan    *plan
	reg     Schemas
	values  map[int]*avroEnvelope
	keys    map[int]*avroRow
	r       *avro.Reader
	max     int // the longest message accepted (SetMaxRecordSize)
	evolve  bool
	changes [2]deltawriter.Change
	slab    rowSlab
}

// NewAvroDecoder returns a decoder of debezium-avro messages for rows of
// schema (which must meet NewDecoder's conditions), taking writer
// schemas from reg.
func NewAvroDecoder(schema *iceberg.Schema, reg Schemas) (*AvroDecoder, error) {
	if reg == nil {
		return nil, errors.New("changelog: debezium-avro needs a schema registry")
	}
	p, err := newPlan(schema)
	if err != nil {
		return nil, err
	}
	return &AvroDecoder{
		plan:   p,
		reg:    reg,
		values: make(map[int]*avroEnvelope),
		keys:   make(map[int]*avroRow),
		r:      newAvroReader(MaxLineSize),
		max:    MaxLineSize,
	}, nil
}

// newAvroReader returns a reader of Avro bodies whose strings and bytes may
// be as long as a whole record may be (hamba/avro's own default is 1 MiB).
func newAvroReader(max int) *avro.Reader {
	return avro.NewReader(nil, 0, avro.WithReaderConfig(avro.Config{MaxByteSliceSize: max}.Freeze()))
}

// SetMaxRecordSize sets the longest message (and so the longest string or
// bytes value) the decoder accepts, in bytes; the default is MaxLineSize,
// as for JSON. A longer message is a bad message (ErrLineTooLong).
func (d *AvroDecoder) SetMaxRecordSize(n int) {
	if n <= 0 {
		n = MaxLineSize
	}
	d.max = n
	d.r = newAvroReader(n)
}

// SetEvolution turns schema evolution on or off: on, a record whose schema
// has a column the table lacks, a wider numeric type or an optional field
// for a required column is reported as a *SchemaChangeError (not the
// record's fault) instead of decoded against the table's schema.
func (d *AvroDecoder) SetEvolution(on bool) {
	d.evolve = on
	clear(d.values)
	clear(d.keys)
}

// SetSchema makes the decoder decode rows of schema from now on (the
// table's schema after it evolved).
func (d *AvroDecoder) SetSchema(schema *iceberg.Schema) error {
	p, err := newPlan(schema)
	if err != nil {
		return err
	}
	d.plan, d.slab = p, rowSlab{}
	clear(d.values)
	clear(d.keys)
	return nil
}

// avroEnvelope is the decoding plan of one Debezium envelope schema.
type avroEnvelope struct {
	fields []envField
}

type envRole uint8

const (
	roleSkip envRole = iota
	roleOp
	roleBefore
	roleAfter
)

type envField struct {
	role envRole
	typ  avro.Schema
	rows []*avroRow // per union branch of before/after: the record's plan (nil: null)
}

// avroRow maps the fields of an Avro record onto the table's columns.
type avroRow struct {
	fields []avroField
	has    []bool // per table column: the record has a field for it
	err    error  // the record cannot fill the table (a field names no column)
	// change: with evolution, how the record's fields differ from the
	// table's columns.
	change *SchemaChangeError
}

// avroField is one field of a row record: its column and, per union
// branch (one when the field is not a union), the column as that branch
// spells it.
type avroField struct {
	name     string
	col      int
	union    bool
	branches []avroBranch
}

type avroBranch struct {
	typ avro.Schema
	c   column
}

// DecodeKeyedMessage decodes one Kafka record: msg is its value, key its
// key (used for a delete without a before image). skip reports an empty
// value. A bad message yields a *MessageError naming the member at fault;
// a registry that cannot be reached yields another error, which is not
// the message's fault.
func (d *AvroDecoder) DecodeKeyedMessage(key, msg []byte) (rec Record, skip bool, err error) {
	if len(msg) == 0 {
		return Record{}, true, nil
	}
	if len(msg) > d.max || len(key) > d.max {
		return Record{}, false, &MessageError{Err: kindErrf(ErrLineTooLong, "record of %d bytes, longer than the maximum record size %d (--max-record-size)", max(len(msg), len(key)), d.max)}
	}
	rec, err = d.decode(key, msg)
	if err != nil {
		return Record{}, false, messageError(err)
	}
	return rec, false, nil
}

// errRegistry marks a lookup that failed for the registry's sake.
var errRegistry = errors.New("schema registry")

func (d *AvroDecoder) decode(key, msg []byte) (Record, error) {
	id, body, err := (&sr.ConfluentHeader{}).DecodeID(msg)
	if err != nil {
		return Record{}, kindErrf(ErrRecord, "not in the schema registry's wire format (a zero byte and a 4-byte schema id first)")
	}
	env, err := d.envelope(id)
	if err != nil {
		return Record{}, err
	}
	r := d.r.Reset(body)
	r.Error = nil
	var op byte
	var before, after []any
	var haveBefore bool
	for _, f := range env.fields {
		switch f.role {
		case roleSkip:
			skipValue(r, f.typ, len(body))
		case roleOp:
			s := r.ReadString()
			if r.Error != nil {
				break
			}
			if len(s) != 1 || strings.IndexByte("crudt", s[0]) < 0 {
				return Record{}, fieldErr("op", kindErrf(ErrUnknownOp, "unknown op %s (want c, r, u or d)", quoteShort([]byte(s))))
			}
			op = s[0]
		case roleBefore, roleAfter:
			where, full := "before", false
			if f.role == roleAfter {
				where, full = "after", true
			}
			i := 0
			if len(f.rows) > 1 {
				i = int(r.ReadLong())
				if r.Error == nil && (i < 0 || i >= len(f.rows)) {
					return Record{}, fieldErr(where, kindErrf(ErrRecord, "union branch %d of %d", i, len(f.rows)))
				}
			}
			if r.Error != nil || f.rows[i] == nil {
				break
			}
			row, err := d.row(f.rows[i], where, full)
			if err != nil {
				return Record{}, err
			}
			if f.role == roleBefore {
				before, haveBefore = row, true
			} else {
				after = row
			}
		}
		if r.Error != nil {
			return Record{}, kindErrf(ErrRecord, "Avro body does not match schema id %d: %v", id, r.Error)
		}
	}
	var keyRow func() ([]any, error)
	if !haveBefore && len(key) > 0 {
		keyRow = func() ([]any, error) { return d.keyRow(key) }
	}
	return eventChanges(&d.changes, op, before, after, keyRow, true)
}

// keyRow decodes a record key (an Avro record of the key columns in the
// wire format) into a delete image.
func (d *AvroDecoder) keyRow(key []byte) ([]any, error) {
	id, body, err := (&sr.ConfluentHeader{}).DecodeID(key)
	if err != nil {
		return nil, fieldErr("key", kindErr(ErrRecord, "the record key is not in the schema registry's wire format"))
	}
	rp, ok := d.keys[id]
	if !ok {
		s, err := d.parse(id)
		if err != nil {
			return nil, err
		}
		rec, isRec := s.(*avro.RecordSchema)
		if !isRec {
			return nil, fieldErr("key", kindErrf(ErrRecord, "key schema id %d is a %s, not a record of the key columns", id, s.Type()))
		}
		rp = d.compileRow(rec, false)
		d.keys[id] = rp
	}
	d.r.Reset(body)
	d.r.Error = nil
	row, err := d.row(rp, "key", false)
	if err == nil && d.r.Error != nil {
		err = fieldErr("key", kindErrf(ErrRecord, "Avro body does not match schema id %d: %v", id, d.r.Error))
	}
	return row, err
}

// envelope returns the plan of value schema id, looking it up the first
// time.
func (d *AvroDecoder) envelope(id int) (*avroEnvelope, error) {
	if e, ok := d.values[id]; ok {
		return e, nil
	}
	s, err := d.parse(id)
	if err != nil {
		return nil, err
	}
	rec, ok := s.(*avro.RecordSchema)
	if !ok {
		return nil, kindErrf(ErrRecord, "schema id %d is a %s, not a Debezium envelope record", id, s.Type())
	}
	e := &avroEnvelope{}
	roles := map[string]envRole{"op": roleOp, "before": roleBefore, "after": roleAfter}
	for _, f := range rec.Fields() {
		ef := envField{role: roles[f.Name()], typ: deref(f.Type())}
		switch ef.role {
		case roleOp:
			if ef.typ.Type() != avro.String {
				return nil, fieldErr("op", kindErrf(ErrRecord, "schema id %d: op is a %s, not a string", id, ef.typ.Type()))
			}
		case roleBefore, roleAfter:
			branches := []avro.Schema{ef.typ}
			if u, ok := ef.typ.(*avro.UnionSchema); ok {
				branches = u.Types()
			}
			for _, b := range branches {
				switch b := deref(b).(type) {
				case *avro.RecordSchema:
					ef.rows = append(ef.rows, d.compileRow(b, true))
				case *avro.NullSchema:
					ef.rows = append(ef.rows, nil)
				default:
					return nil, fieldErr(f.Name(), kindErrf(ErrRecord, "schema id %d: %s is a %s, not a record or null", id, f.Name(), b.Type()))
				}
			}
		}
		e.fields = append(e.fields, ef)
	}
	if !hasField(rec, "op") {
		return nil, kindErrf(ErrRecord, "schema id %d (%s) is not a Debezium envelope: it has no op field", id, rec.FullName())
	}
	d.values[id] = e
	return e, nil
}

func hasField(rec *avro.RecordSchema, name string) bool {
	for _, f := range rec.Fields() {
		if f.Name() == name {
			return true
		}
	}
	return false
}

// parse looks schema id up in the registry and parses it.
func (d *AvroDecoder) parse(id int) (avro.Schema, error) {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	text, err := d.reg.Schema(ctx, id)
	if errors.Is(err, ErrUnknownSchema) {
		return nil, kindErrf(ErrUnknownSchema, "schema id %d: %v", id, err)
	}
	if errors.Is(err, ErrUnsupportedSchema) {
		return nil, kindErrf(ErrUnsupported, "schema id %d: %v", id, err)
	}
	if err != nil {
		return nil, fmt.Errorf("changelog: looking up schema id %d: %w: %w", id, errRegistry, err)
	}
	// A cache per schema: two versions of a table's schema name the same
	// records differently.
	s, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
	if err != nil {
		return nil, kindErrf(ErrRecord, "schema id %d is not an Avro schema: %v", id, err)
	}
	return s, nil
}

// deref resolves a reference to a named schema defined earlier.
func deref(s avro.Schema) avro.Schema {
	if r, ok := s.(*avro.RefSchema); ok {
		return r.Schema()
	}
	return s
}

// compileRow maps record rec's fields onto the table's columns; image: rec
// is a row image (before, after), not a record key, so a required column
// it lacks was dropped at the source.
func (d *AvroDecoder) compileRow(rec *avro.RecordSchema, image bool) *avroRow {
	rp := &avroRow{has: make([]bool, len(d.plan.cols))}
	if d.evolve && image {
		if drop := d.plan.dropped(func(name string) bool { return hasField(rec, name) }); len(drop) > 0 {
			rp.change = &SchemaChangeError{Columns: drop}
		}
	}
	for _, f := range rec.Fields() {
		if d.evolve {
			d.diff(rp, f)
		}
		i, ok := d.plan.byName[f.Name()]
		if !ok {
			if rp.err == nil {
				rp.err = fieldErr(f.Name(), kindErr(ErrUnknownColumn, "no such column in the table schema"))
			}
			continue
		}
		rp.has[i] = true
		af := avroField{name: f.Name(), col: i}
		typ := deref(f.Type())
		branches := []avro.Schema{typ}
		if u, ok := typ.(*avro.UnionSchema); ok {
			af.union, branches = true, u.Types()
		}
		for _, b := range branches {
			b = deref(b)
			c := d.plan.cols[i]
			c.enc, c.encScale = avroEncoding(&c, b)
			af.branches = append(af.branches, avroBranch{typ: b, c: c})
		}
		rp.fields = append(rp.fields, af)
	}
	return rp
}

// diff records in rp how field f differs from the table's column.
func (d *AvroDecoder) diff(rp *avroRow, f *avro.Field) {
	typ, nullable, err := fieldType(f)
	if err != nil {
		return // a field the row decoder names, if not a column
	}
	if ev, ok := d.plan.schemaDiff(f.Name(), typ, nullable); ok {
		if rp.change == nil {
			rp.change = &SchemaChangeError{}
		}
		rp.change.Columns = append(rp.change.Columns, ev)
	}
}

// avroEncoding is how Avro schema s spells values of column c: the Kafka
// Connect / Debezium type its connect.name property names, else its Avro
// logical type.
func avroEncoding(c *column, s avro.Schema) (encoding, int) {
	var props avro.PropertySchema
	if p, ok := s.(avro.PropertySchema); ok {
		props = p
	}
	if props != nil {
		if name, _ := props.Prop("connect.name").(string); name != "" {
			cf := connectField{Type: string(s.Type()), Name: name, Parameters: map[string]string{}}
			if params, ok := props.Prop("connect.parameters").(map[string]any); ok {
				for k, v := range params {
					if sv, ok := v.(string); ok {
						cf.Parameters[k] = sv
					}
				}
			}
			if _, ok := cf.Parameters["scale"]; !ok {
				if ls, ok := logicalDecimal(s); ok {
					cf.Parameters["scale"] = strconv.Itoa(ls.Scale())
				}
			}
			enc, scale, err := connectEncoding(c, cf)
			if err == nil && enc != encDefault {
				return enc, scale
			}
		}
	}
	if ls, ok := logicalDecimal(s); ok {
		return encDecimalBytes, ls.Scale()
	}
	if lt, ok := s.(avro.LogicalTypeSchema); ok && lt.Logical() != nil {
		switch lt.Logical().Type() {
		case avro.TimestampMillis, avro.TimeMillis, avro.LocalTimestampMillis:
			return encMillis, 0
		case avro.TimestampMicros, avro.TimeMicros, avro.LocalTimestampMicros:
			return encMicros, 0
		}
	}
	return encDefault, 0
}

func logicalDecimal(s avro.Schema) (*avro.DecimalLogicalSchema, bool) {
	lt, ok := s.(avro.LogicalTypeSchema)
	if !ok || lt.Logical() == nil {
		return nil, false
	}
	ls, ok := lt.Logical().(*avro.DecimalLogicalSchema)
	return ls, ok
}

// row decodes a record of plan rp at the reader's position.
func (d *AvroDecoder) row(rp *avroRow, where string, full bool) ([]any, error) {
	if rp.change != nil {
		return nil, rp.change
	}
	if rp.err != nil {
		var fe *fieldError
		if errors.As(rp.err, &fe) {
			return nil, fieldErr(fe.field, in(where, fe.err))
		}
		return nil, rp.err
	}
	row := d.slab.next(len(d.plan.cols))
	r := d.r
	for i := range rp.fields {
		f := &rp.fields[i]
		b := 0
		if f.union {
			b = int(r.ReadLong())
			if r.Error != nil {
				return nil, nil // reported by the caller
			}
			if b < 0 || b >= len(f.branches) {
				return nil, fieldErr(f.name, in(where, kindErrf(ErrRecord, "union branch %d of %d", b, len(f.branches))))
			}
		}
		br := &f.branches[b]
		v, err := d.value(br.typ, &br.c)
		if err != nil {
			return nil, fieldErr(f.name, in(where, err))
		}
		if r.Error != nil {
			return nil, nil
		}
		row[f.col] = v
	}
	if err := checkNulls(d.plan.cols, row, full, where, func(i int) bool { return rp.has[i] }); err != nil {
		return nil, err
	}
	return row, nil
}

// value reads one value of Avro schema s (not a union) as column c's.
func (d *AvroDecoder) value(s avro.Schema, c *column) (any, error) {
	r := d.r
	switch s.Type() {
	case avro.Null:
		return nil, nil
	case avro.Boolean:
		v := r.ReadBool()
		if c.kind != kBool {
			return nil, kindErrf(ErrType, "%s needs %s, got an Avro boolean", c.typ, wants(c))
		}
		return v, nil
	case avro.Int:
		return intValue(c, int64(r.ReadInt()))
	case avro.Long:
		return intValue(c, r.ReadLong())
	case avro.Float:
		return floatValue(c, float64(r.ReadFloat()), 32)
	case avro.Double:
		return floatValue(c, r.ReadDouble(), 64)
	case avro.String:
		if c.kind == kString {
			// hamba's strings point into a slab it never writes again.
			return r.ReadString(), nil
		}
		b := r.ReadBytes()
		var tmp []byte
		return textValue(c, b, &tmp)
	case avro.Enum:
		i := int(r.ReadInt())
		sym, ok := s.(*avro.EnumSchema).Symbol(i)
		if !ok {
			return nil, kindErrf(ErrRecord, "enum index %d out of range", i)
		}
		var tmp []byte
		return textValue(c, []byte(sym), &tmp)
	case avro.Bytes:
		return bytesAs(c, r.ReadBytes())
	case avro.Fixed:
		b := make([]byte, s.(*avro.FixedSchema).Size())
		r.Read(b)
		return bytesAs(c, b)
	case avro.Record:
		if rec := s.(*avro.RecordSchema); rec.FullName() == "io.debezium.data.VariableScaleDecimal" {
			return nil, kindErrf(ErrUnsupported, "io.debezium.data.VariableScaleDecimal (a scale per value) cannot fill %s; set the connector's decimal.handling.mode=string or precise", c.typ)
		}
	}
	return nil, kindErrf(ErrUnsupported, "an Avro %s cannot fill %s (nested values are not supported)", s.Type(), c.typ)
}

// bytesAs converts Avro bytes to column c's value: the unscaled value of a
// decimal, else binary or fixed.
func bytesAs(c *column, b []byte) (any, error) {
	switch {
	case c.kind == kDecimal && c.enc == encDecimalBytes:
		return unscaledDecimal(b, c, c.encScale)
	case c.kind == kBinary || c.kind == kFixed:
		return bytesValue(c, b)
	}
	return nil, kindErrf(ErrType, "%s needs %s, got Avro bytes", c.typ, wants(c))
}

// floatValue converts an Avro float (bits 32) or double to column c's
// value: the nearest float or double; an integral value for int and long,
// exactly for decimal (from its shortest spelling, as in JSON).
func floatValue(c *column, f float64, bits int) (any, error) {
	switch c.kind {
	case kDouble:
		return f, nil
	case kFloat:
		v := float32(f)
		if math.IsInf(float64(v), 0) && !math.IsInf(f, 0) {
			return nil, kindErrf(ErrRange, "%g does not fit a %s", f, c.typ)
		}
		return v, nil
	}
	var tmp []byte
	return textValue(c, strconv.AppendFloat(nil, f, 'g', -1, bits), &tmp)
}

// skipValue reads past a value of schema s in a body of size bytes.
func skipValue(r *avro.Reader, s avro.Schema, size int) {
	switch s := deref(s).(type) {
	case *avro.PrimitiveSchema:
		switch s.Type() {
		case avro.Boolean:
			r.SkipBool()
		case avro.Int:
			r.SkipInt()
		case avro.Long:
			r.SkipLong()
		case avro.Float:
			r.SkipFloat()
		case avro.Double:
			r.SkipDouble()
		case avro.String:
			r.SkipString()
		case avro.Bytes:
			r.SkipBytes()
		}
	case *avro.FixedSchema:
		r.SkipNBytes(s.Size())
	case *avro.EnumSchema:
		r.SkipInt()
	case *avro.UnionSchema:
		i := int(r.ReadLong())
		if i < 0 || i >= len(s.Types()) {
			r.ReportError("skip", "union branch out of range")
			return
		}
		skipValue(r, s.Types()[i], size)
	case *avro.RecordSchema:
		for _, f := range s.Fields() {
			skipValue(r, f.Type(), size)
		}
	case *avro.ArraySchema:
		skipBlocks(r, size, encodedEmpty(s.Items()), func() { skipValue(r, s.Items(), size) })
	case *avro.MapSchema:
		// A map entry holds its key's length at least.
		skipBlocks(r, size, false, func() { r.SkipString(); skipValue(r, s.Values(), size) })
	}
}

// skipBlocks reads past the blocks of an array or map in a body of size
// bytes; empty reports items that take no bytes (nulls), of which a block
// may hold any count. Otherwise each item takes a byte at least, so a
// block counting more items than the body has bytes is refused before it
// is walked: a crafted count cannot keep the decoder busy.
func skipBlocks(r *avro.Reader, size int, empty bool, item func()) {
	for r.Error == nil {
		n, bytes := r.ReadBlockHeader()
		switch {
		case r.Error != nil || n == 0:
			return
		case bytes > 0:
			r.SkipNBytes(int(bytes))
			continue
		case empty:
			continue
		case n < 0 || n > int64(size):
			r.ReportError("skip", fmt.Sprintf("a block of %d items in a body of %d bytes", n, size))
			return
		}
		for i := int64(0); i < n && r.Error == nil; i++ {
			item()
		}
	}
}

// encodedEmpty reports a schema whose values take no bytes (null, fixed of
// size 0, a record of such fields).
func encodedEmpty(s avro.Schema) bool {
	switch s := deref(s).(type) {
	case *avro.NullSchema:
		return true
	case *avro.FixedSchema:
		return s.Size() == 0
	case *avro.RecordSchema:
		for _, f := range s.Fields() {
			if !encodedEmpty(f.Type()) {
				return false
			}
		}
		return true
	}
	return false
}
