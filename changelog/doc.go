// Package changelog owns the input formats: it decodes changelog-json and
// debezium-json lines, and debezium-avro messages (AvroDecoder: the schema
// registry's wire format, schemas asked of a Schemas), into deltawriter
// changes typed by an Iceberg schema, and reports bad input by line and
// field. With evolution on, events whose schema differs from the table's
// are reported as a *SchemaChangeError instead (SetSchema, then decode
// again); SchemaFromConnect and SchemaFromDebeziumAvro derive a new table's
// schema from the events'. It knows nothing of tables, files or commits.
// Its Encoder and AvroEncoder write changes back as input (used to
// generate test streams).
//
// # Lines
//
// The input is one JSON value a line, each ended by '\n' ("\r\n" works too,
// '\r' being JSON whitespace); the last line may lack its terminator. Lines
// are numbered from 1, counting every line, also the empty and
// whitespace-only ones, which are passed over. A UTF-8 byte order mark at
// the very start of the input is ignored. A line longer than MaxLineSize
// (or WithMaxRecordSize's limit) is an error (ErrLineTooLong). Record.Line is an input position: a new
// Decoder that first calls Skip(Line) resumes right after that record.
//
// In both formats a line {"barrier":true} is a barrier: it ends a
// checkpoint and carries no change. ("barrier":false is as if absent.)
//
// # changelog-json
//
//	{"op":"+I"|"-U"|"+U"|"-D","data":{"column":value,...}}
//
// Members may come in any order; top-level members other than op, data and
// barrier are ignored.
//
// # debezium-json
//
// A Debezium change event envelope, bare or wrapped as
// {"schema":...,"payload":{...}} (as Kafka Connect's JsonConverter writes it
// with schemas enabled; schema is ignored):
//
//	op "c", "r"  +I of after
//	op "u"       -U of before when before is not null, then +U of after
//	op "d"       -D of before (null: of the record key, DecodeKeyedMessage)
//	op "t"       an error (ErrUnsupported): a truncate cannot be applied per key
//
// Any other op is an error. Envelope members other than op, before and
// after (source, ts_ms, transaction, ...) are ignored. A line that is JSON
// null, or has "payload":null (Kafka tombstones), is passed over.
//
// # Columns, keys and nulls
//
// data, before and after are objects keyed by column name: exact,
// case-sensitive, after JSON unescaping. A name that is not a top-level
// column of the schema is an error (ErrUnknownColumn), and so is the same
// name twice in one object (ErrDuplicateKey; there is no "last wins"). An
// absent column is null. Duplicates of ignored members are not checked.
//
// The key is the schema's identifier-field-ids (composite keys work); key
// columns must be present and non-null in every row (ErrNull). An image
// that writes a row (+I, +U, Debezium after) needs every required column
// non-null; a delete image (-D, -U, Debezium before) needs only the key,
// its other columns may be absent or null (they decode to nil), and
// values that are present are still type-checked.
//
// # Values
//
// JSON null is nil for every type. Otherwise, per the column's Iceberg type
// (the Go types are those documented on deltawriter.Change):
//
//	boolean        true or false
//	int, long      a JSON number with an integral value (1, 1.0, 1e2 and 100e-2 are
//	               all integers; 1.5 is an error), or a string holding one ("17");
//	               beyond the type's range is an error (ErrRange)
//	float, double  a JSON number, rounded to the nearest value (overflow is an
//	               error, underflow gives 0), a string holding one, or the strings
//	               "NaN", "Infinity", "-Infinity"
//	decimal(P,S)   a JSON number or a string holding one, converted exactly without
//	               floating point: 1.50 is 15 in decimal(5,1); 1.55 there (it would
//	               need rounding) is an error, as is more than P-S integer digits
//	date           "YYYY-MM-DD" (years 0000-9999), or an integer number of days
//	               since 1970-01-01 (as Debezium's io.debezium.time.Date)
//	time           "HH:MM:SS[.fffffffff]", up to 9 fraction digits, those past the
//	               microsecond being 0
//	timestamp      RFC 3339 "YYYY-MM-DDTHH:MM:SS[.f]" ('T', 't' or ' ' between),
//	               with no offset, or with Z or ±HH:MM, which converts it to UTC;
//	               fraction digits as for time; the result must lie in years
//	               0000-9999 UTC
//	timestamptz    the same, but the offset (Z or ±HH:MM) is required
//	string         any JSON string
//	uuid           the canonical "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", either case
//	binary         standard, padded base64 ("AAEC/w=="); line breaks in it are
//	               ignored, non-canonical trailing bits are an error
//	fixed(L)       the same, decoding to exactly L bytes
//
// A string "holding a number" holds exactly the JSON number grammar: no
// spaces, no '+', no leading zeros.
//
// # Debezium's encodings
//
// Debezium spells some values by their source column's logical type. An
// event with a Kafka Connect schema ({"schema":...,"payload":...}, the
// JsonConverter's default schemas.enable=true) names that type per column,
// and the decoder follows it (the schema is parsed once while it repeats):
//
//	org.apache.kafka.connect.data.Decimal  base64 of the big-endian two's-complement
//	                                      unscaled value at the schema's scale
//	                                      (decimal.handling.mode=precise, the
//	                                      default), converted exactly to the column
//	io.debezium.time.Timestamp, Time,     integer milliseconds since the epoch or
//	Kafka Connect Timestamp, Time         midnight
//	io.debezium.time.MicroTimestamp,      integer microseconds
//	MicroTime
//	io.debezium.time.NanoTimestamp,       integer nanoseconds (a sub-microsecond
//	NanoTime                              remainder is an error)
//	io.debezium.time.Date                 integer days (accepted anyway)
//	io.debezium.time.ZonedTimestamp       an RFC 3339 string (accepted anyway)
//	io.debezium.data.VariableScaleDecimal an error: use decimal.handling.mode=precise
//	                                      or string
//
// Events without a schema (schemas.enable=false) do not say which unit an
// integer timestamp has, nor whether a decimal string is base64:
// WithDebezium says it for the whole input (icesink run --debezium-decimal,
// --debezium-time-unit); without it, integers in time and timestamp
// columns are refused and decimal strings hold numbers
// (decimal.handling.mode=string). decimal.handling.mode=double gives JSON
// numbers, accepted as any number. The other spellings (strings, numbers)
// stay accepted in every column whatever the schema says.
//
// All of the line must be RFC 8259 JSON, ignored members included: invalid
// UTF-8, unpaired surrogate escapes and nesting deeper than 512 are errors
// (ErrSyntax).
//
// # Errors
//
// A bad line yields a *LineError, `line N: field "name": reason`, whose Err
// matches one of the Err* categories with errors.Is. The line is consumed,
// so Next may be called again to go on with the next line.
//
// Nested columns (struct, list, map) and v3 types are refused by
// NewDecoder: "nested types are not supported yet".
//
// # debezium-avro
//
// A message is a zero byte, a 4-byte big-endian schema id and the Avro
// body of a Debezium envelope (before, after, op, ...). Each value decodes
// as its debezium-json spelling would: the field's Kafka Connect name
// (connect.name) or Avro logical type says a time's unit or a decimal's
// scale, as a Connect schema does for JSON. An id not seen before is asked
// of the Schemas (ErrUnknownSchema when it has none, ErrUnsupportedSchema
// when it is not plain Avro: a bad message); a Schemas that cannot answer
// is not the message's fault (a plain error). A message, and so a string or
// bytes value, may be as long as a JSON line (SetMaxRecordSize); a block
// count is bounded by the body's length.
package changelog
