package main

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/icesink/icesink/internal/testcert"
	"github.com/icesink/icesink/kafka"
)

// TestKafkaSecuredCluster: `icesink run` reads a broker that requires TLS
// and SASL/SCRAM with --kafka-tls-ca, --kafka-sasl-mechanism and
// --kafka-sasl-user, the password from a file or the environment; a wrong
// password stops the run with a message that names the SASL user; a
// password flag does not exist (it would show in ps).
func TestKafkaSecuredCluster(t *testing.T) {
	caFile, server := testcert.Server(t, t.TempDir())
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "cdc"), kfake.TLS(server),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "icesink", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sec := kafka.Security{CAFile: caFile, SASLMechanism: "SCRAM-SHA-512", User: "icesink", Password: "s3cret"}
	opts, err := sec.Options()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("cdc"), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, lines := stream(t, rand.New(rand.NewPCG(47, 47)), 2000, 300)
	var recs []*kgo.Record
	for _, l := range lines {
		recs = append(recs, &kgo.Record{Value: l, Partition: partitionOf(t, l, 3)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	wh := t.TempDir()
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--warehouse", wh, "--table", "db.t", "--schema", writeSchema(t), "--kafka-brokers", c.ListenAddrs()[0], "--topic", "cdc",
		"--stop-at-end", "--quiet", "--kafka-tls-ca", caFile, "--kafka-sasl-mechanism", "scram-sha-512", "--kafka-sasl-user", "icesink"}

	t.Setenv(saslPasswordEnv, "wrong")
	_, stderr, code := icesink(t, args...)
	if code == 0 || !strings.Contains(stderr, `user "icesink"`) {
		t.Fatalf("a wrong password: exit %d, %s; want a failure naming the SASL user", code, stderr)
	}
	// A database run names them too (issue 46 item 16: it said only "EOF").
	dbArgs := []string{"run", "--warehouse", wh, "--table-template", "db.{topic}", "--format", "debezium-json", "--kafka-brokers", c.ListenAddrs()[0], "--topic", "cdc",
		"--stop-at-end", "--quiet", "--kafka-tls-ca", caFile, "--kafka-sasl-mechanism", "scram-sha-512", "--kafka-sasl-user", "icesink"}
	if _, stderr, code := icesink(t, dbArgs...); code == 0 || !strings.Contains(stderr, `user "icesink"`) {
		t.Fatalf("a database run with a wrong password: exit %d, %s; want a failure naming the SASL user", code, stderr)
	}
	if _, stderr, code := icesink(t, append(args, "--kafka-sasl-password", "s3cret")...); code != 2 {
		t.Fatalf("a password flag: exit %d, %s; want a usage error", code, stderr)
	}
	// The file wins over the environment.
	if _, stderr, code := icesink(t, append(args, "--kafka-sasl-password-file", pwFile)...); code != 0 {
		t.Fatalf("run over TLS and SASL: exit %d\n%s", code, stderr)
	}
	got, _, _ := icesink(t, "scan", "--warehouse", wh, "--table", "db.t")
	if want := expectedScan(t, lines, len(lines)); got != want {
		t.Errorf("the table differs from the stream read over TLS and SASL")
	}
}

// TestCleartextWarnings: SASL PLAIN without TLS and the registry's basic
// auth over http:// are warned of (issue 46 item 16); with TLS, SCRAM or
// https, nothing is said.
func TestCleartextWarnings(t *testing.T) {
	for _, tc := range []struct {
		f    kafkaFlags
		want string
	}{
		{kafkaFlags{sec: kafka.Security{SASLMechanism: "plain", User: "u"}}, `password of user "u" to the brokers in clear text`},
		{kafkaFlags{sec: kafka.Security{SASLMechanism: "plain", User: "u", TLS: true}}, ""},
		{kafkaFlags{sec: kafka.Security{SASLMechanism: "plain", User: "u", CAFile: "ca.pem"}}, ""},
		{kafkaFlags{sec: kafka.Security{SASLMechanism: "scram-sha-512", User: "u"}}, ""},
		{kafkaFlags{registryURL: "https://r:8081,http://r2:8081", registryUser: "k"}, `over http://r2:8081 sends the password of user "k"`},
		{kafkaFlags{registryURL: "https://r:8081", registryUser: "k"}, ""},
		{kafkaFlags{registryURL: "http://r:8081"}, ""},
	} {
		got := strings.Join(tc.f.cleartextWarnings(), "\n")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: warnings %q, want %q", tc.f.sec, got, tc.want)
		}
	}
}
