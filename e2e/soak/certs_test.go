//go:build soak

package soak

import (
	"bytes"
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
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/sandbox-fence/sandbox-fence/e2e/cluster"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

const (
	// certLifetime is the validity of each serving certificate: shorter
	// than the run, so a webhook that failed to reload would serve an
	// expired certificate and every admission would fail.
	certLifetime = 45 * time.Second
	// rotateEvery leaves room for certwatcher's 10 s poll fallback before
	// the previous certificate expires.
	rotateEvery = 15 * time.Second
	rotations   = 4
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

// hostReview is the AdmissionReview the API server sends the webhook for
// the bound host's (dry-run) create of policy.
func hostReview(t *testing.T, policy []byte, name string) []byte {
	t.Helper()
	user := framework.ServiceAccountUser(env.HostNamespace, framework.HostServiceAccount)
	dry := true
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID(uuid.NewUUID()),
			Kind:      metav1.GroupVersionKind{Group: "cilium.io", Version: "v2", Kind: "CiliumNetworkPolicy"},
			Resource:  metav1.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"},
			Namespace: env.HostNamespace, Name: name, Operation: admissionv1.Create, DryRun: &dry,
			UserInfo: authnv1.UserInfo{Username: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + env.HostNamespace, "system:authenticated"}},
			Object:   runtime.RawExtension{Raw: policy},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Scenario 3 (issue 7): short-lived serving certificates are replaced under
// load through the mechanism the Deployment relies on: the Secret volume is
// updated in place and the webhook's certwatcher reloads --cert-dir; the
// caBundle keeps trusting the same CA. After each rotation: a fresh TLS
// handshake verified against the caBundle must be served the new
// certificate; admission reviews sent over fresh verified connections must
// be answered (the valid write allowed, the invented owner refused); and the
// API server must open a fresh connection to the webhook (its client is
// rebuilt by rewriting the caBundle with the same CA in new bytes), which
// can only handshake with the new certificate, and admit over it. Under
// constant keep-alive load it would otherwise never handshake again. No
// admission may fail.
func TestCertificateRotationUnderLoad(t *testing.T) {
	const sc = "3 cert rotation"
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	p := component(t, "webhook")
	ap := component(t, "kube-apiserver")
	hp := newHostPolicy(ctx, t)
	vol := &secretVolume{dir: p.Flag("cert-dir")}
	inventedBody, err := json.Marshal(hp.invalid.Object)
	if err != nil {
		t.Fatal(err)
	}

	// The local provider keeps no webhook CA key, so the soak re-roots the
	// webhook on a CA it holds before the load starts (not counted).
	ca, err := cluster.NewCA("sandbox-fence-soak-webhook-ca")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
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
		got, err := verifiedSerial(p, pool)
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
	var reloads, reconnects []time.Duration
	var freshFailed, noReconnect int64
	var freshReviews int
	fail := func(err error) {
		load.finish()
		t.Fatal(err)
	}
	for i := range rotations {
		select {
		case <-time.After(rotateEvery): // the rotation schedule
		case <-ctx.Done():
			fail(ctx.Err())
		}
		certPEM, keyPEM, serial, err := issueShortLived(ca, certLifetime)
		if err != nil {
			fail(err)
		}
		wrote := time.Now()
		if err := vol.write(certPEM, keyPEM); err != nil {
			fail(err)
		}
		// A handshake verified against the caBundle, as the API server
		// makes one, is served the new certificate.
		if err := framework.Eventually(ctx, 30*time.Second, 50*time.Millisecond, fmt.Sprintf("rotation %d served on a verified handshake", i+1), func(context.Context) (bool, string, error) {
			got, err := verifiedSerial(p, pool)
			return err == nil && got == serial.String(), fmt.Sprintf("served %s (%v)", got, err), nil
		}); err != nil {
			fail(err)
		}
		reloads = append(reloads, time.Since(wrote))
		// Admissions over fresh connections with the new certificate.
		for _, c := range []struct {
			name, body string
			allowed    bool
		}{{"valid", string(hp.valid), true}, {"invented owner", string(inventedBody), false}} {
			freshReviews++
			resp, err := freshReview(ctx, p, pool, webhook.CiliumEgressPath, hostReview(t, []byte(c.body), hp.name))
			switch {
			case err != nil:
				freshFailed++
				t.Errorf("rotation %d: %s review over a fresh connection: %v", i+1, c.name, err)
			case resp.Allowed != c.allowed || !c.allowed && (resp.Result == nil || !strings.HasPrefix(resp.Result.Message, "cilium-fence:")):
				freshFailed++
				t.Errorf("rotation %d: %s review over a fresh connection: allowed=%v, %+v", i+1, c.name, resp.Allowed, resp.Result)
			}
		}
		// The API server on a fresh connection: a new caBundle (the same
		// CA, in bytes never used before) makes it build a new client.
		before, err := connsTo(ap.Pid, p.Flag("port"))
		if err != nil {
			fail(err)
		}
		bumped := time.Now()
		if err := setCABundle(ctx, bytes.Repeat(ca.CertPEM, i+2)); err != nil {
			fail(err)
		}
		var fresh time.Time
		if err := framework.Eventually(ctx, 30*time.Second, 20*time.Millisecond, fmt.Sprintf("rotation %d: kube-apiserver opens a fresh connection to the webhook", i+1), func(context.Context) (bool, string, error) {
			now, err := connsTo(ap.Pid, p.Flag("port"))
			if err != nil {
				return false, "", err
			}
			for port := range now {
				if !before[port] {
					fresh = time.Now()
					return true, "", nil
				}
			}
			return false, fmt.Sprintf("%d connections, all from before", len(now)), nil
		}); err != nil {
			noReconnect++
			t.Error(err)
			continue
		}
		if _, err := load.admittedSince(ctx, fresh, 30*time.Second); err != nil {
			noReconnect++
			t.Errorf("rotation %d: no valid write admitted after kube-apiserver's fresh connection: %v", i+1, err)
			continue
		}
		reconnects = append(reconnects, fresh.Sub(bumped))
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
		got, err := verifiedSerial(p, pool)
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
	figures.note(sc, "rotations", "%d, every %s, each certificate valid %s (same CA; the caBundle rewritten with it after each)", rotations, rotateEvery, certLifetime)
	figures.note(sc, "write to served on a handshake verified against the caBundle (certwatcher reload)", "%s", durations(reloads))
	figures.count(t, sc, "reviews over fresh verified connections answered wrongly or not at all", freshFailed, true)
	figures.note(sc, "reviews over fresh verified connections", "%d (a valid and an invented-owner review after each rotation)", freshReviews)
	figures.note(sc, "caBundle rewritten to kube-apiserver's fresh connection to the webhook", "%s", durations(reconnects))
	figures.count(t, sc, "rotations without a fresh kube-apiserver connection admitting", noReconnect, true)
	figures.note(sc, "admissions during rotation", "%d in %s: %d valid admitted, %d invented-owner refused by the webhook's verdict", valid+invalid, elapsed.Round(time.Second), validOK, invalidVerdict)
	figures.count(t, sc, "failed admissions", failed, true)
}
