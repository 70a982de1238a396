package cluster

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func parseCert(t *testing.T, p Pair) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(p.CertPEM)
	if b == nil {
		t.Fatal("no PEM certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The apiserver takes the user from the CN and the groups from O; a
// break-glass identity that lost its group would make every repair case
// meaningless.
func TestClientCertificatesCarryUserAndGroupsAndVerifyAgainstTheCA(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Client("fence-breakglass", []string{"sandbox-fence:break-glass"})
	if err != nil {
		t.Fatal(err)
	}
	c := parseCert(t, p)
	got := struct {
		User   string
		Groups []string
	}{c.Subject.CommonName, c.Subject.Organization}
	want := struct {
		User   string
		Groups []string
	}{"fence-breakglass", []string{"sandbox-fence:break-glass"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("subject (-want +got):\n%s", d)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate does not verify for client auth: %v", err)
	}
}

func TestServingCertificateVerifiesForLoopback(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Serving("webhook", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if _, err := parseCert(t, p).Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
			t.Errorf("serving certificate does not verify for %s: %v", host, err)
		}
	}
}

// A component that ignores SIGTERM (kube-apiserver draining) must still be
// gone after the bounded grace, with its whole process group.
func TestStopKillsAProcessGroupThatIgnoresSIGTERM(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	script := `trap '' TERM; sleep 300 & echo $! > ` + pidFile + `; wait`
	p, err := StartProcess("stubborn", "/bin/sh", []string{"-c", script}, filepath.Join(dir, "log"), false)
	if err != nil {
		t.Fatal(err)
	}
	var child int
	deadline := time.Now().Add(10 * time.Second)
	for child == 0 && time.Now().Before(deadline) {
		if b, err := os.ReadFile(pidFile); err == nil && strings.TrimSpace(string(b)) != "" {
			child = atoi(t, strings.TrimSpace(string(b)))
			break
		}
		time.Sleep(20 * time.Millisecond) // polling a file the child writes
	}
	if child == 0 {
		t.Fatal("the child never wrote its pid")
	}
	start := time.Now()
	p.Stop(300 * time.Millisecond)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Stop took %s, want about the 300ms grace", took)
	}
	if exited, _ := p.Exited(); !exited {
		t.Error("the process is still running after Stop")
	}
	if !waitGone(child, 5*time.Second) {
		t.Errorf("grandchild %d survived Stop of its process group", child)
	}
}

func TestStopPidEndsADetachedProcess(t *testing.T) {
	p, err := StartProcess("detached", "/bin/sleep", []string{"300"}, filepath.Join(t.TempDir(), "log"), true)
	if err != nil {
		t.Fatal(err)
	}
	if !Alive(p.Pid) {
		t.Fatal("process not alive after start")
	}
	if err := StopPid(p.Pid, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	<-p.done
	if Alive(p.Pid) {
		t.Errorf("pid %d alive after StopPid", p.Pid)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			t.Fatalf("not a pid: %q", s)
		}
		n = n*10 + int(r-'0')
	}
	return n
}
