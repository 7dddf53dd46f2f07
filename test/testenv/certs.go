package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// certAuthority is a CA of the test bed, valid for a day: it signs serving and client
// certificates.
type certAuthority struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	pem    []byte
	serial int64
}

func newCA(cn string) (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &certAuthority{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial: 1}, nil
}

// issue signs a certificate for cn with a new key: a serving certificate for dnsNames and ips
// when usage is x509.ExtKeyUsageServerAuth, a client certificate for ExtKeyUsageClientAuth.
func (ca *certAuthority) issue(cn string, usage x509.ExtKeyUsage, dnsNames []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key of %s: %w", cn, err)
	}
	ca.serial++
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("create certificate of %s: %w", cn, err)
	}
	keyPEM, err = ecKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func ecKeyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	b, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: b}), nil
}

// writeFiles writes each of files (name → content) into dir, readable by the owner only.
func writeFiles(dir string, files map[string][]byte) error {
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// apiServerCerts writes what kube-apiserver reads from its --cert-dir — apiserver.crt and
// apiserver.key (a serving certificate for localhost, 127.0.0.1 and serviceIP) and the service
// account signing key pair sa-signer.key and sa-signer.crt, the names envtest uses — plus the CA
// as ca.crt, and returns the CA in PEM. envtest writes the same files itself when they are
// missing, but its serving certificate names loopback only: a pod reaches kube-apiserver at the
// kubernetes Service's ClusterIP and checks that the certificate names it.
func apiServerCerts(dir string, serviceIP net.IP) (caPEM []byte, err error) {
	ca, err := newCA("reconscope-testenv-ca")
	if err != nil {
		return nil, err
	}
	crt, key, err := ca.issue("kube-apiserver", x509.ExtKeyUsageServerAuth,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		[]net.IP{net.IPv4(127, 0, 0, 1), serviceIP})
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate service account key: %w", err)
	}
	saKeyPEM, err := ecKeyPEM(saKey)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("marshal service account public key: %w", err)
	}
	return ca.pem, writeFiles(dir, map[string][]byte{
		"ca.crt":        ca.pem,
		"apiserver.crt": crt,
		"apiserver.key": key,
		"sa-signer.key": saKeyPEM,
		"sa-signer.crt": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
	})
}

// TLSFiles are the PEM files WriteTLSFiles writes.
type TLSFiles struct {
	// CA signed the two certificates below.
	CA string
	// ServerCert and ServerKey are a serving certificate for localhost and 127.0.0.1.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client certificate (CN reconscope-agent).
	ClientCert, ClientKey string
}

// WriteTLSFiles writes a new CA and a serving and a client certificate it signed into a
// temporary folder of t, for TLS and mutual TLS between loopback processes.
func WriteTLSFiles(t testing.TB) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	ca, err := newCA("reconscope-testenv-tls-ca")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	srv, srvKey, err := ca.issue("localhost", x509.ExtKeyUsageServerAuth, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	cli, cliKey, err := ca.issue("reconscope-agent", x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if err := writeFiles(dir, map[string][]byte{"ca.crt": ca.pem, "server.crt": srv, "server.key": srvKey, "client.crt": cli, "client.key": cliKey}); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	return TLSFiles{CA: p("ca.crt"), ServerCert: p("server.crt"), ServerKey: p("server.key"), ClientCert: p("client.crt"), ClientKey: p("client.key")}
}
