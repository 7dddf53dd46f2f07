package metricsauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"sync"
	"time"
)

// ServerTLS returns the TLS configuration of the metrics endpoint. With certFile and keyFile
// (PEM, e.g. a kubernetes.io/tls Secret mounted as files) it serves that pair and loads it
// again when either file changes (a renewed certificate needs no restart). With neither, it
// serves a self-signed certificate made in memory for hostnames (plus localhost and the
// loopback addresses), new at each start: clients then skip verification (Prometheus:
// tlsConfig.insecureSkipVerify), as with kubebuilder's default.
func ServerTLS(certFile, keyFile string, hostnames ...string) (*tls.Config, error) {
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("metrics TLS: give both a certificate and a key file, or neither (self-signed)")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if certFile == "" {
		cert, err := SelfSigned(hostnames...)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
		return cfg, nil
	}
	kp := &keyPair{certFile: certFile, keyFile: keyFile}
	if _, err := kp.get(nil); err != nil {
		return nil, err
	}
	cfg.GetCertificate = kp.get
	return cfg, nil
}

// keyPair is a certificate and key read from files, read again when their modification times
// change.
type keyPair struct {
	certFile, keyFile string
	mu                sync.Mutex
	certMod, keyMod   time.Time
	cert              *tls.Certificate
}

func (k *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	cs, err := os.Stat(k.certFile)
	if err != nil {
		return k.cached(fmt.Errorf("metrics TLS certificate: %w", err))
	}
	ks, err := os.Stat(k.keyFile)
	if err != nil {
		return k.cached(fmt.Errorf("metrics TLS key: %w", err))
	}
	if k.cert != nil && cs.ModTime().Equal(k.certMod) && ks.ModTime().Equal(k.keyMod) {
		return k.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		// A renewal caught between its two writes: keep serving the last good pair.
		return k.cached(fmt.Errorf("load metrics TLS key pair %s, %s: %w", k.certFile, k.keyFile, err))
	}
	k.cert, k.certMod, k.keyMod = &cert, cs.ModTime(), ks.ModTime()
	return k.cert, nil
}

// cached returns the last good pair, or err when there is none.
func (k *keyPair) cached(err error) (*tls.Certificate, error) {
	if k.cert != nil {
		return k.cert, nil
	}
	return nil, err
}

// SelfSigned makes a self-signed ECDSA P-256 serving certificate for hostnames, localhost,
// 127.0.0.1 and ::1, valid for a year.
func SelfSigned(hostnames ...string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate metrics TLS key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate certificate serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "reconscope-agent"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range hostnames {
		if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("create self-signed metrics certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
