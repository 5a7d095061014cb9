package kafka_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/icesink/icesink/changelog"
	"github.com/icesink/icesink/internal/testcert"
	"github.com/icesink/icesink/kafka"
)

// TestSecuredCluster: a broker that requires TLS and SASL/SCRAM is read
// with the CA and the user's password; a wrong password is refused with
// an error that says authentication failed, and so is a client without
// TLS.
func TestSecuredCluster(t *testing.T) {
	caFile, server := testcert.Server(t, t.TempDir())
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"} {
		t.Run(mech, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "t"), kfake.TLS(server),
				kfake.EnableSASL(), kfake.Superuser(mech, "icesink", "s3cret"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			good := kafka.Security{CAFile: caFile, SASLMechanism: strings.ToLower(mech), User: "icesink", Password: "s3cret"}
			opts, err := good.Options()
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			produceLines(t, cl, 30)

			s := open(t, c, kafka.Config{StopAtEnd: true, Security: good})
			if err := s.Seek(context.Background(), nil, 0); err != nil {
				t.Fatal(err)
			}
			if ids, _ := readAll(t, s); len(ids) != 30 {
				t.Fatalf("read %d changes over TLS and SASL, want 30", len(ids))
			}

			for name, sec := range map[string]kafka.Security{
				"wrong password": {CAFile: caFile, SASLMechanism: mech, User: "icesink", Password: "nope"},
				"no TLS":         {SASLMechanism: mech, User: "icesink", Password: "s3cret"},
			} {
				dec, _ := changelog.NewDecoder(strings.NewReader(""), changelog.ChangelogJSON, schema)
				s, err := kafka.Open(context.Background(), kafka.Config{Brokers: c.ListenAddrs(), Topic: "t", StopAtEnd: true, Security: sec,
					Options: []kgo.Opt{kgo.RequestRetries(0), kgo.RetryTimeout(2 * time.Second), kgo.DialTimeout(2 * time.Second)}}, dec)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err = s.Seek(ctx, nil, 0)
				cancel()
				s.Close()
				if err == nil {
					t.Fatalf("%s: the secured cluster was read", name)
				}
				if name == "wrong password" && !strings.Contains(err.Error(), "password") {
					t.Fatalf("%s: %v, want an error naming the authentication", name, err)
				}
			}
		})
	}
}

// TestSecurityRefusesBadSettings: settings that cannot work are refused
// before any connection, naming what is wrong.
func TestSecurityRefusesBadSettings(t *testing.T) {
	for _, s := range []kafka.Security{
		{SASLMechanism: "GSSAPI", User: "u", Password: "p"},
		{SASLMechanism: "PLAIN", User: "u"},
		{User: "u", Password: "p"},
		{CertFile: "c.pem"},
		{CAFile: filepath.Join(t.TempDir(), "missing.pem")},
	} {
		if _, err := s.Options(); !errors.Is(err, kafka.ErrSecurity) {
			t.Errorf("%+v: %v, want ErrSecurity", s, err)
		}
	}
}
