package coordgrpc

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Security is how writers and the coordinator trust each other. The zero
// value is plaintext without a token: the coordinator then accepts any
// writer that reaches its port, so it must listen only on a trusted
// network (loopback, a private subnet).
type Security struct {
	// TLS, when set, encrypts the connection. On the server it holds the
	// server's certificate (and ClientCAs with RequireAndVerifyClientCert
	// for mutual TLS); on a writer, the CAs it trusts (and its own
	// certificate for mutual TLS). See LoadServerTLS and LoadClientTLS.
	TLS *tls.Config
	// Token, when set, is a shared secret every writer must present; the
	// coordinator refuses a session without it (codes.Unauthenticated).
	Token string
}

// Keepalives: a writer pings an idle connection every 30 s and drops it
// when the answer takes over 10 s, so a vanished coordinator or network
// path is noticed without waiting for a stream timeout.
const (
	keepaliveTime    = 30 * time.Second
	keepaliveTimeout = 10 * time.Second
)

// LoadServerTLS reads the coordinator's certificate and key; with
// clientCA, writers must present a certificate it signed (mutual TLS).
func LoadServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("coordinator TLS: loading %s and %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		pool, err := loadPool(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// LoadClientTLS reads the CA a writer trusts for the coordinator's
// certificate (empty: the system's), and, for mutual TLS, the writer's own
// certificate and key.
func LoadClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("coordinator TLS: loading %s and %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("coordinator TLS: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("coordinator TLS: %s holds no PEM certificate", file)
	}
	return pool, nil
}

// ReadToken reads a shared token from a file (surrounding white space
// dropped); an empty file is an error.
func ReadToken(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("coordinator token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("coordinator token: %s is empty", file)
	}
	return t, nil
}

// ServerOptions are the grpc.Server options sec asks for (credentials, the
// token check), with keepalives; pass them to Serve.
func (sec Security) ServerOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveTime / 3, PermitWithoutStream: true}),
	}
	if sec.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(sec.TLS)))
	}
	if sec.Token != "" {
		want := []byte("Bearer " + sec.Token)
		opts = append(opts, grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			md, _ := metadata.FromIncomingContext(ss.Context())
			got := md.Get("authorization")
			if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), want) != 1 {
				return status.Error(codes.Unauthenticated, "coordinator: the writer's token is missing or wrong (--auth-token-file)")
			}
			return handler(srv, ss)
		}))
	}
	return opts
}

// dialOptions are the grpc client options sec asks for, with keepalives.
func (sec Security) dialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
	}
	if sec.TLS != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(sec.TLS)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if sec.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds{token: sec.Token, secure: sec.TLS != nil}))
	}
	return opts
}

// tokenCreds sends the shared token with every stream.
type tokenCreds struct {
	token  string
	secure bool
}

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + t.token}, nil
}

// RequireTransportSecurity is false without TLS: a token over plaintext
// only keeps out writers of other jobs on a trusted network.
func (t tokenCreds) RequireTransportSecurity() bool { return t.secure }
