package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Security is how the clients reach a secured cluster: TLS (a CA, a
// client certificate, the server name) and SASL. The zero value is
// plaintext without authentication.
type Security struct {
	// TLS turns TLS on (implied by any TLS file or ServerName).
	TLS bool
	// CAFile is a PEM bundle of the CAs to trust; default: the system's.
	CAFile string
	// CertFile and KeyFile are the client certificate and key (PEM) for
	// brokers that require one; both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name checked in the brokers' certificates.
	ServerName string
	// SASLMechanism is "", "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512"
	// (any case).
	SASLMechanism string
	// User and Password authenticate with SASLMechanism.
	User, Password string
}

// ErrSecurity marks a Security that cannot be applied: a file that cannot
// be read, a mechanism that is not known, a user without a password.
var ErrSecurity = errors.New("kafka: security settings")

// Options returns the franz-go client options for s, for Config.Options
// and JoinGroup.
func (s Security) Options() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	cfg, err := s.tlsConfig()
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if s.SASLMechanism == "" {
		if s.User != "" {
			return nil, fmt.Errorf("%w: a SASL user without a mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", ErrSecurity)
		}
		return opts, nil
	}
	if s.User == "" || s.Password == "" {
		return nil, fmt.Errorf("%w: SASL %s needs a user and a password", ErrSecurity, s.SASLMechanism)
	}
	var mech sasl.Mechanism
	switch strings.ToUpper(s.SASLMechanism) {
	case "PLAIN":
		mech = plain.Auth{User: s.User, Pass: s.Password}.AsMechanism()
	case "SCRAM-SHA-256":
		mech = scram.Auth{User: s.User, Pass: s.Password}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		mech = scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism()
	default:
		return nil, fmt.Errorf("%w: SASL mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", ErrSecurity, s.SASLMechanism)
	}
	return append(opts, kgo.SASL(mech)), nil
}

// tlsConfig is s's TLS configuration; nil when TLS is off.
func (s Security) tlsConfig() (*tls.Config, error) {
	if !s.TLS && s.CAFile == "" && s.CertFile == "" && s.KeyFile == "" && s.ServerName == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerName}
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: TLS CA file: %w", ErrSecurity, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: TLS CA file %s holds no PEM certificate", ErrSecurity, s.CAFile)
		}
	}
	switch {
	case s.CertFile != "" && s.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: TLS client certificate: %w", ErrSecurity, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case s.CertFile != "" || s.KeyFile != "":
		return nil, fmt.Errorf("%w: a TLS client certificate needs both its certificate and its key file", ErrSecurity)
	}
	return cfg, nil
}

// hint explains a connection the broker closed at once: with SASL or TLS
// that is how many brokers answer a wrong password or a plaintext client.
func (s Security) hint(err error) string {
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return ""
	}
	if s.SASLMechanism != "" {
		return fmt.Sprintf(" (the broker closed the connection: check the SASL %s user %q and its password, and whether the listener wants TLS)", strings.ToUpper(s.SASLMechanism), s.User)
	}
	return " (the broker closed the connection: does its listener want TLS or SASL?)"
}
