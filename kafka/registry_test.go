package kafka_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/kafka"
)

var avroSource = changelog.DebeziumSource{Server: "srv", DB: "db", Schema: "public", Table: "t"}

// registry starts an in-process schema registry (Confluent's REST API)
// that wants basic auth icesink:pw, holding schema's Debezium value and key
// schemas.
func registry(t *testing.T) (reg *srfake.Registry, valueID, keyID int) {
	t.Helper()
	reg = srfake.New(srfake.WithAuth("Basic " + base64.StdEncoding.EncodeToString([]byte("icesink:pw"))))
	t.Cleanup(reg.Close)
	v, k, err := changelog.DebeziumAvroSchema(schema, avroSource)
	if err != nil {
		t.Fatal(err)
	}
	if valueID, _, err = reg.RegisterSchema("t-value", sr.Schema{Schema: v, Type: sr.TypeAvro}); err != nil {
		t.Fatal(err)
	}
	if keyID, _, err = reg.RegisterSchema("t-key", sr.Schema{Schema: k, Type: sr.TypeAvro}); err != nil {
		t.Fatal(err)
	}
	return reg, valueID, keyID
}

func TestRegistry(t *testing.T) {
	reg, valueID, _ := registry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := kafka.NewRegistry(kafka.RegistryConfig{URLs: []string{reg.URL()}, User: "icesink"}); !errors.Is(err, kafka.ErrSecurity) {
		t.Fatalf("a user without a password: %v", err)
	}
	bad, _ := kafka.NewRegistry(kafka.RegistryConfig{URLs: []string{reg.URL()}, User: "icesink", Password: "nope"})
	if _, err := bad.Schema(ctx, valueID); err == nil || !strings.Contains(err.Error(), "refused the credentials") {
		t.Fatalf("a wrong password: %v", err)
	}
	r, err := kafka.NewRegistry(kafka.RegistryConfig{URLs: []string{reg.URL()}, User: "icesink", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Schema(ctx, 4242); !errors.Is(err, changelog.ErrUnknownSchema) {
		t.Fatalf("an unknown id: %v, want ErrUnknownSchema", err)
	}
	if s, err := r.Latest(ctx, "t-value"); err != nil || !strings.Contains(s, "Envelope") {
		t.Fatalf("Latest(t-value): %v %.40q", err, s)
	}
	if _, err := r.Latest(ctx, "nope-value"); !errors.Is(err, changelog.ErrUnknownSchema) {
		t.Fatalf("Latest of an unknown subject: %v", err)
	}
	// A registry that fails twice with 503 is asked again.
	var calls atomic.Int32
	reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	s, err := r.Schema(ctx, valueID)
	if err != nil || !strings.Contains(s, "Envelope") || calls.Load() != 3 {
		t.Fatalf("after two 503s: %v (%d calls), schema %.40q", err, calls.Load(), s)
	}
	// Kept: a registry that is down no longer matters for that id.
	reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		w.WriteHeader(http.StatusInternalServerError)
		return true
	})
	if _, err := r.Schema(ctx, valueID); err != nil {
		t.Fatalf("a kept schema: %v", err)
	}
}

// switchable is a registry that can be taken down.
type switchable struct {
	down atomic.Bool
	reg  *kafka.Registry
}

func (s *switchable) Schema(ctx context.Context, id int) (string, error) {
	if s.down.Load() {
		return "", errors.New("dial tcp: connection refused")
	}
	return s.reg.Schema(ctx, id)
}

// TestSourceAvroRegistryDown: Avro records decode through the registry; a
// registry out of reach stops Next at the record (which is not sent to
// the dead-letter topic), and the next call reads it again.
func TestSourceAvroRegistryDown(t *testing.T) {
	reg, valueID, keyID := registry(t)
	c, cl := cluster(t, 3, "dlq")
	enc, err := changelog.NewAvroEncoder(schema, avroSource)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for _, id := range []int64{0, 3, 6} {
		row := []any{id, "n", decimal128.FromI64(id * 100)}
		v, err := enc.AppendDebeziumAvro(nil, valueID, nil, row[:len(schema.Fields())])
		if err != nil {
			t.Fatal(err)
		}
		k, _ := enc.AppendKeyAvro(nil, keyID, row[:len(schema.Fields())])
		recs = append(recs, &kgo.Record{Key: k, Value: v, Partition: 0})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r, _ := kafka.NewRegistry(kafka.RegistryConfig{URLs: []string{reg.URL()}, User: "icesink", Password: "pw"})
	sw := &switchable{reg: r}
	sw.down.Store(true)
	dec, err := changelog.NewAvroDecoder(schema, sw)
	if err != nil {
		t.Fatal(err)
	}
	s, err := kafka.Open(context.Background(), kafka.Config{Brokers: c.ListenAddrs(), Topic: "t", StopAtEnd: true, DeadLetterTopic: "dlq"}, dec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Seek(context.Background(), nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err == nil || !strings.Contains(err.Error(), "topic t partition 0 offset 0") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("registry down: %v, want an error naming the record and the registry", err)
	}
	if n := len(s.DeadLetters()); n != 0 {
		t.Fatalf("%d records dead-lettered while the registry was down", n)
	}
	sw.down.Store(false)
	ids, _ := readAll(t, s)
	if len(ids) != 3 || ids[0] != 0 || ids[1] != 3 || ids[2] != 6 {
		t.Fatalf("ids %v after the registry came back, want [0 3 6]", ids)
	}
}

// TestRegistryAnswers: only the registry's own answer for an unknown id
// (error code 40403) makes a bad record; a 404 from something else (a
// proxy's page, a wrong path prefix) is an outage. A schema the registry
// has but icesink cannot read (not Avro, Avro with references) is a bad
// record naming the id and the kind.
func TestRegistryAnswers(t *testing.T) {
	reg, valueID, _ := registry(t)
	r, err := kafka.NewRegistry(kafka.RegistryConfig{URLs: []string{reg.URL()}, User: "icesink", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	protoID, _, err := reg.RegisterSchema("p-value", sr.Schema{Type: sr.TypeProtobuf, Schema: `syntax = "proto3"; message M { int64 id = 1; }`})
	if err != nil {
		t.Fatal(err)
	}
	refID, _, err := reg.RegisterSchema("r-value", sr.Schema{Type: sr.TypeAvro,
		Schema:     `{"type":"record","name":"R","fields":[{"name":"v","type":"Envelope"}]}`,
		References: []sr.SchemaReference{{Name: "Envelope", Subject: "t-value", Version: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		id   int
		text string
	}{{protoID, "is a PROTOBUF schema, not Avro"}, {refID, "references to other subjects (t-value)"}} {
		_, err := r.Schema(ctx, tc.id)
		if !errors.Is(err, changelog.ErrUnsupportedSchema) || !strings.Contains(err.Error(), tc.text) || !strings.Contains(err.Error(), fmt.Sprint(tc.id)) {
			t.Errorf("schema id %d: %v, want ErrUnsupportedSchema naming the id and %q", tc.id, err, tc.text)
		}
	}
	if _, err := r.Latest(ctx, "p-value"); !errors.Is(err, changelog.ErrUnsupportedSchema) {
		t.Errorf("Latest(p-value): %v, want ErrUnsupportedSchema", err)
	}
	// The decoder makes it a bad message, not a held one.
	dec, err := changelog.NewAvroDecoder(schema, r)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = dec.DecodeKeyedMessage(nil, append([]byte{0, 0, 0, 0, byte(protoID)}, 0))
	var me *changelog.MessageError
	if !errors.As(err, &me) || !errors.Is(err, changelog.ErrUnsupported) {
		t.Errorf("a protobuf record: %v, want a bad message (ErrUnsupported)", err)
	}

	// A proxy's 404 page: an outage (asked again until the context ends),
	// never ErrUnknownSchema.
	var proxy atomic.Bool
	proxy.Store(true)
	reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if !proxy.Load() {
			return false
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("<html><body>404 Not Found</body></html>"))
		return true
	})
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	if _, err := r.Schema(short, 4242); err == nil || errors.Is(err, changelog.ErrUnknownSchema) {
		t.Errorf("a proxy's 404: %v, want an outage", err)
	}
	if _, err := r.Latest(ctx, "nope-value"); err == nil || errors.Is(err, changelog.ErrUnknownSchema) {
		t.Errorf("Latest behind a proxy's 404: %v, want an outage", err)
	}
	proxy.Store(false)
	if _, err := r.Schema(ctx, valueID); err != nil {
		t.Errorf("after the proxy: %v", err)
	}
}
