//go:build soak

package soak

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

const (
	// certLifetime is the validity of each serving certificate: shorter
	// than the run, so a webhook that failed to reload would serve an
	// expired certificate and every admission would fail.
	certLifetime = 45 * time.Second
	// rotateEvery leaves room for certwatcher's 10 s poll fallback before
	// the previous certificate expires.
	rotateEvery = 15 * time.Second
	rotations   = 6
)

// issueShortLived signs a serving certificate for 127.0.0.1 valid for
// lifetime from now, as cert-manager or the rotator would with a short
// duration.
func issueShortLived(ca *cluster.CA, lifetime time.Duration) (certPEM, keyPEM []byte, serial *big.Int, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	serial, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "sandbox-fence-webhook"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    now.Add(-5 * time.Second),
		NotAfter:     now.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), serial, nil
}

// secretVolume writes the certificate directory the way the kubelet
// updates a mounted Secret (its AtomicWriter): the files are symlinks
// through ..data, and an update writes a new timestamped directory and
// renames a new ..data link over the old one, so a reader never sees a new
// certificate with an old key.
type secretVolume struct {
	dir string
	gen int
}

func (v *secretVolume) write(certPEM, keyPEM []byte) error {
	v.gen++
	data := fmt.Sprintf("..%d_%d", time.Now().UnixNano(), v.gen)
	if err := os.MkdirAll(filepath.Join(v.dir, data), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(v.dir, data, "tls.crt"), certPEM, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(v.dir, data, "tls.key"), keyPEM, 0o600); err != nil {
		return err
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	tmp := filepath.Join(v.dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(data, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		return err
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		link := filepath.Join(v.dir, f)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join("..data", f) {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", f), link+".tmp"); err != nil {
			return err
		}
		if err := os.Rename(link+".tmp", link); err != nil {
			return err
		}
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(v.dir, old))
	}
	return nil
}

// setCABundle points every webhook of the configuration at one CA.
func setCABundle(ctx context.Context, caPEM []byte) error {
	vwc, err := env.Admin.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, framework.WebhookConfigName, metav1GetOptions)
	if err != nil {
		return err
	}
	var ops []map[string]any
	for i := range vwc.Webhooks {
		ops = append(ops, map[string]any{"op": "replace", "path": fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), "value": b64(caPEM)})
	}
	body, _ := json.Marshal(ops)
	_, err = env.Admin.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, framework.WebhookConfigName, types.JSONPatchType, body, metav1PatchOptions)
	return err
}

// Scenario 3 (issue 7): short-lived serving certificates are replaced under
// load through the mechanism the Deployment relies on: the Secret volume is
// updated in place and the webhook's certwatcher reloads --cert-dir; the
// caBundle keeps trusting the same CA. No admission may fail.
func TestCertificateRotationUnderLoad(t *testing.T) {
	const sc = "3 cert rotation"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := component(t, "webhook")
	hp := newHostPolicy(ctx, t)
	vol := &secretVolume{dir: p.Flag("cert-dir")}

	// The local provider keeps no webhook CA key, so the soak re-roots the
	// webhook on a CA it holds before the load starts (not counted).
	ca, err := cluster.NewCA("sandbox-fence-soak-webhook-ca")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, serial, err := issueShortLived(ca, certLifetime)
	if err != nil {
		t.Fatal(err)
	}
	if err := vol.write(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	if err := setCABundle(ctx, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	// The host's policy is created before the swap; its writes are then
	// retried until the API server trusts the new chain.
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, "the API server trusts the soak CA's certificate", func(ctx context.Context) (bool, string, error) {
		got, err := servedSerial(p)
		if err != nil || got != serial.String() {
			return false, fmt.Sprintf("served %s (%v)", got, err), nil
		}
		if err := hp.writeValid(ctx); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	}); err != nil {
		t.Fatal(err)
	}

	load := startLoad(ctx, 40*time.Millisecond, map[string][]func(context.Context) error{
		"valid":   {hp.writeValid, hp.writeValid, hp.writeValid},
		"invalid": {hp.writeInvalid},
	})
	start := time.Now()
	var reloads []time.Duration
	for i := range rotations {
		select {
		case <-time.After(rotateEvery): // the rotation schedule
		case <-ctx.Done():
			load.finish()
			t.Fatal(ctx.Err())
		}
		certPEM, keyPEM, serial, err := issueShortLived(ca, certLifetime)
		if err != nil {
			load.finish()
			t.Fatal(err)
		}
		wrote := time.Now()
		if err := vol.write(certPEM, keyPEM); err != nil {
			load.finish()
			t.Fatal(err)
		}
		if err := framework.Eventually(ctx, 30*time.Second, 50*time.Millisecond, fmt.Sprintf("rotation %d served", i+1), func(context.Context) (bool, string, error) {
			got, err := servedSerial(p)
			return err == nil && got == serial.String(), fmt.Sprintf("served %s (%v)", got, err), nil
		}); err != nil {
			load.finish()
			t.Fatal(err)
		}
		reloads = append(reloads, time.Since(wrote))
	}
	// One more rotation period with load: the first certificates have
	// expired by now, so only reloaded ones can be serving.
	select {
	case <-time.After(rotateEvery):
	case <-ctx.Done():
	}
	outcomes := load.finish()
	elapsed := time.Since(start)
	// Hand the next scenarios a certificate that outlives them: the last
	// short-lived one expires 45 s from now, and a webhook restarted after
	// that would serve it (the chaos scenario restarts it).
	handBack, handBackKey, handBackSerial, err := issueShortLived(ca, time.Until(ca.Cert.NotAfter))
	if err != nil {
		t.Fatal(err)
	}
	if err := vol.write(handBack, handBackKey); err != nil {
		t.Fatal(err)
	}
	if err := framework.Eventually(ctx, 30*time.Second, 50*time.Millisecond, "long-lived certificate served", func(context.Context) (bool, string, error) {
		got, err := servedSerial(p)
		return err == nil && got == handBackSerial.String(), fmt.Sprintf("served %s (%v)", got, err), nil
	}); err != nil {
		t.Fatal(err)
	}

	var valid, validOK, invalid, invalidVerdict, failed int64
	var example string
	for _, o := range outcomes {
		switch {
		case o.kind == "valid":
			valid++
			if o.err == nil {
				validOK++
				continue
			}
		case o.kind == "invalid":
			invalid++
			if o.err != nil && webhookRefusal(o.err) {
				invalidVerdict++
				continue
			}
		}
		failed++
		if example == "" && o.err != nil {
			example = o.err.Error()
		}
		if o.kind == "invalid" && o.err == nil {
			t.Errorf("an invented-owner write was admitted during rotation")
		}
	}
	if example != "" {
		t.Errorf("first failed admission: %s", example)
	}
	if exited, _ := p.Exited(); exited {
		t.Errorf("the webhook exited during rotation:\n%s", p.Tail(20))
	}
	figures.note(sc, "rotations", "%d, every %s, each certificate valid %s (same CA, caBundle unchanged)", rotations, rotateEvery, certLifetime)
	figures.note(sc, "write to served (certwatcher reload)", "%s", durations(reloads))
	figures.note(sc, "admissions during rotation", "%d in %s: %d valid admitted, %d invented-owner refused by the webhook's verdict", valid+invalid, elapsed.Round(time.Second), validOK, invalidVerdict)
	figures.count(t, sc, "failed admissions", failed, true)
}
