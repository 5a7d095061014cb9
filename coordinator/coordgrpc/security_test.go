package coordgrpc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/icesink/icesink/coordinator"
	"github.com/icesink/icesink/coordinator/internal/jobtest"
)

// writeCert writes a certificate for 127.0.0.1 (signed by parent, or
// self-signed as a CA) and its key as PEM files.
func writeCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key, certFile, keyFile
}

// TestSecurity: a coordinator with mutual TLS and a shared token accepts a
// writer that has both, and refuses one with a wrong token, one without a
// client certificate and one over plaintext, each with a clear error.
func TestSecurity(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, caFile, _ := writeCert(t, dir, "ca", nil, nil)
	_, _, srvCert, srvKey := writeCert(t, dir, "server", ca, caKey)
	_, _, cliCert, cliKey := writeCert(t, dir, "writer", ca, caKey)
	srvTLS, err := LoadServerTLS(srvCert, srvKey, caFile)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	token, err := ReadToken(tokenFile)
	if err != nil || token != "s3cret" {
		t.Fatalf("ReadToken = %q, %v", token, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	c, err := coordinator.Start(ctx, coordinator.Config{Vnodes: 4}, &jobtest.Table{}, &coordinator.MemStore{},
		coordinator.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go Serve(ctx, lis, c, Security{TLS: srvTLS, Token: token}.ServerOptions()...)
	addr := lis.Addr().String()

	cliTLS, err := LoadClientTLS(caFile, cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	noCertTLS, err := LoadClientTLS(caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		sec  Security
		want string
	}{
		"wrong token":    {Security{TLS: cliTLS, Token: "guess"}, "token"},
		"no token":       {Security{TLS: cliTLS}, "token"},
		"no client cert": {Security{TLS: noCertTLS, Token: token}, ""},
		"plaintext":      {Security{Token: token}, ""},
	} {
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := DialSecure(dctx, addr, tc.sec, roaring.BitmapOf(0))
		dcancel()
		if err == nil {
			s.Close()
			t.Errorf("%s: accepted", name)
			continue
		}
		t.Logf("%s: %v", name, err)
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to mention %q", name, err, tc.want)
		}
	}
	s, err := DialSecure(ctx, addr, Security{TLS: cliTLS, Token: token}, roaring.BitmapOf(0, 1, 2, 3))
	if err != nil {
		t.Fatalf("a writer with the certificate and the token: %v", err)
	}
	defer s.Close()
	if commit, err := s.Checkpoint(ctx, 1, 0, false); err != nil || !commit {
		t.Fatalf("checkpoint over TLS: %v, %v", commit, err)
	}
}
