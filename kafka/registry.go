package kafka

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/icesink/icesink/changelog"
)

// RegistryConfig is how to reach a schema registry (Confluent's REST API,
// as Karapace, Apicurio's compatibility API and Redpanda also serve it).
type RegistryConfig struct {
	// URLs are the registry's base URLs, tried in turn.
	URLs []string
	// User and Password authenticate with HTTP basic auth (Confluent
	// Cloud's API key and secret); both or neither.
	User, Password string
	// TLS is the registry's TLS: a CA to trust, a client certificate, the
	// server name (its SASL fields are not used). https URLs use TLS with
	// the system's CAs without it.
	TLS Security
}

// Registry looks up Avro schemas by id in a schema registry, keeping
// every schema it fetched: a schema id never changes meaning. It is
// changelog.Schemas and safe for concurrent use.
type Registry struct {
	cl    *sr.Client
	mu    sync.Mutex
	cache map[int]string
}

// NewRegistry returns a client of the registry cfg names; it does not
// connect until the first lookup.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("kafka: schema registry: no URL")
	}
	opts := []sr.ClientOpt{sr.URLs(cfg.URLs...), sr.UserAgent("icesink")}
	switch {
	case cfg.User != "" && cfg.Password != "":
		opts = append(opts, sr.BasicAuth(cfg.User, cfg.Password))
	case cfg.User != "" || cfg.Password != "":
		return nil, fmt.Errorf("%w: the schema registry's basic auth needs a user and a password", ErrSecurity)
	}
	tlsCfg, err := cfg.TLS.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("schema registry: %w", err)
	}
	if tlsCfg != nil {
		opts = append(opts, sr.HTTPClient(&http.Client{
			Timeout:   20 * time.Second,
			Transport: &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment},
		}))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: schema registry: %w", err)
	}
	return &Registry{cl: cl, cache: make(map[int]string)}, nil
}

// Schema returns the Avro schema registered under id. An id the registry
// does not know matches changelog.ErrUnknownSchema; a registry that does
// not answer, or answers with a server error, is asked again with backoff
// until ctx ends.
func (r *Registry) Schema(ctx context.Context, id int) (string, error) {
	r.mu.Lock()
	s, ok := r.cache[id]
	r.mu.Unlock()
	if ok {
		return s, nil
	}
	wait := 100 * time.Millisecond
	for {
		got, err := r.cl.SchemaByID(ctx, id)
		var re *sr.ResponseError
		switch {
		case err == nil:
			if got.Type != sr.TypeAvro {
				return "", fmt.Errorf("kafka: schema registry: schema id %d is a %s schema, not Avro: %w", id, got.Type, changelog.ErrUnsupportedSchema)
			}
			if len(got.References) > 0 {
				return "", fmt.Errorf("kafka: schema registry: schema id %d is an Avro schema with references to other subjects (%s), which icesink does not resolve: %w", id, got.References[0].Subject, changelog.ErrUnsupportedSchema)
			}
			r.mu.Lock()
			r.cache[id] = got.Schema
			r.mu.Unlock()
			return got.Schema, nil
		case errors.As(err, &re) && re.ErrorCode == sr.ErrSchemaNotFound.Code:
			// The registry's own answer: the id is not registered.
			return "", fmt.Errorf("kafka: schema registry: %w (%s)", changelog.ErrUnknownSchema, re.Message)
		case refused(err):
			return "", refusedErr(err)
		case errors.As(err, &re) && re.StatusCode < 500 && re.StatusCode != http.StatusTooManyRequests && re.StatusCode != http.StatusNotFound:
			return "", fmt.Errorf("kafka: schema registry: schema id %d: %w", id, err)
		}
		// Unreachable, a server error, throttled, or a 404 that is not the
		// registry's answer for an unknown id (a proxy's page, a wrong path
		// prefix): an outage, not a bad record; ask again.
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("kafka: schema registry: schema id %d: %w (gave up: %w)", id, err, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// Latest returns the newest Avro schema registered under subject (with
// Confluent's default naming, TOPIC-value and TOPIC-key). A subject the
// registry does not have matches changelog.ErrUnknownSchema.
func (r *Registry) Latest(ctx context.Context, subject string) (string, error) {
	got, err := r.cl.SchemaByVersion(ctx, subject, -1)
	var re *sr.ResponseError
	switch {
	case errors.As(err, &re) && (re.ErrorCode == sr.ErrSubjectNotFound.Code || re.ErrorCode == sr.ErrVersionNotFound.Code):
		// The registry's own answer; a bare 404 (a proxy, a wrong path)
		// is the registry's outage, reported below.
		return "", fmt.Errorf("kafka: schema registry: subject %q: %w (%s)", subject, changelog.ErrUnknownSchema, re.Message)
	case refused(err):
		return "", refusedErr(err)
	case err != nil:
		return "", fmt.Errorf("kafka: schema registry: subject %q: %w", subject, err)
	case got.Type != sr.TypeAvro:
		return "", fmt.Errorf("kafka: schema registry: subject %q holds a %s schema, not Avro: %w", subject, got.Type, changelog.ErrUnsupportedSchema)
	}
	return got.Schema.Schema, nil
}

// refused reports a registry that refused the credentials.
func refused(err error) bool {
	var re *sr.ResponseError
	return errors.As(err, &re) && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden)
}

func refusedErr(err error) error {
	var re *sr.ResponseError
	errors.As(err, &re)
	return fmt.Errorf("kafka: schema registry refused the credentials (HTTP %d: %s); check the registry user and password", re.StatusCode, strings.TrimSpace(re.Message))
}
