package main

import (
	"crypto/tls"
	"flag"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func parse(t *testing.T, env map[string]string, args ...string) (*options, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := bindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return o, o.validate()
}

func TestFlags(t *testing.T) {
	type summary struct {
		Port                                    int
		Bind, Metrics, Probe, Config, Namespace string
		CertRotation                            bool
		TLSMin                                  uint16
		Lookup                                  time.Duration
		Enforcement                             string
	}
	cases := []struct {
		name    string
		env     map[string]string
		args    []string
		want    summary
		wantErr string
	}{{
		name: "out of cluster the defaults serve files from --cert-dir on all addresses",
		env:  map[string]string{"KUBERNETES_SERVICE_HOST": "", "POD_NAMESPACE": ""},
		want: summary{Port: 9443, Metrics: ":8443", Probe: ":8081", Config: "sandbox-fence", Namespace: "sandbox-fence-system", TLSMin: tls.VersionTLS12, Lookup: 3 * time.Second, Enforcement: "deny"},
	}, {
		name: "in a cluster certificates are rotated and the namespace comes from the pod",
		env:  map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "POD_NAMESPACE": "fence"},
		want: summary{Port: 9443, Metrics: ":8443", Probe: ":8081", Config: "sandbox-fence", Namespace: "fence", CertRotation: true, TLSMin: tls.VersionTLS12, Lookup: 3 * time.Second, Enforcement: "deny"},
	}, {
		name: "the e2e harness's flags are accepted as given",
		env:  map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "POD_NAMESPACE": ""},
		args: []string{"--cert-dir=/tmp/c", "--port=19443", "--bind-address=127.0.0.1", "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:18081",
			"--config-name=other", "--tls-min-version=1.3", "--cert-rotation=false", "--lookup-timeout=2s", "--enforcement=warn"},
		want: summary{Port: 19443, Bind: "127.0.0.1", Metrics: "0", Probe: "127.0.0.1:18081", Config: "other", Namespace: "sandbox-fence-system", TLSMin: tls.VersionTLS13, Lookup: 2 * time.Second, Enforcement: "warn"},
	}, {
		name:    "TLS 1.1 is refused",
		args:    []string{"--tls-min-version=1.1"},
		wantErr: `--tls-min-version "1.1": must be 1.2 or 1.3`,
	}, {
		name:    "an enforcement mode that does not exist is refused",
		args:    []string{"--enforcement=dryrun"},
		wantErr: `--enforcement "dryrun": must be deny, warn or audit`,
	}, {
		name:    "a zero lookup timeout is refused",
		args:    []string{"--lookup-timeout=0s"},
		wantErr: "--lookup-timeout 0s: must be positive",
	}, {
		name:    "an owner cache wait that leaves the live read no time is refused",
		args:    []string{"--owner-cache-wait=3s"},
		wantErr: "--owner-cache-wait 3s: must be at least 0 and below --lookup-timeout (3s), which the live read after it needs",
	}, {
		name:    "rotation without a namespace is refused",
		args:    []string{"--cert-rotation=true", "--namespace=", "--leader-elect=false"},
		wantErr: "--cert-rotation needs --namespace, --cert-secret-name and --service-name",
	}, {
		name:    "leader election without a namespace is refused",
		args:    []string{"--namespace="},
		wantErr: "--leader-elect needs --namespace, where the Lease lives",
	}, {
		name:    "no webhook configuration to render into is refused",
		args:    []string{"--webhook-config-name="},
		wantErr: "--webhook-config-name: must not be empty: the controller renders the bound hosts into it",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parse(t, tc.env, tc.args...)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tc.wantErr {
				t.Fatalf("error: want %q, got %q", tc.wantErr, gotErr)
			}
			if err != nil {
				return
			}
			v, _ := o.tlsVersion()
			got := summary{Port: o.port, Bind: o.bindAddress, Metrics: o.metricsAddr, Probe: o.probeAddr, Config: o.configName,
				Namespace: o.namespace, CertRotation: o.certRotation, TLSMin: v, Lookup: o.lookupTimeout, Enforcement: o.enforcement}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// HTTP/2 stays off whatever the TLS version: the listener offers only
// http/1.1 in ALPN.
func TestTLSOptsDisableHTTP2(t *testing.T) {
	for _, v := range []string{"1.2", "1.3"} {
		o := &options{tlsMinVersion: v}
		c := &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
		for _, f := range o.tlsOpts() {
			f(c)
		}
		want, _ := o.tlsVersion()
		if diff := cmp.Diff([]string{"http/1.1"}, c.NextProtos); diff != "" || c.MinVersion != want {
			t.Errorf("tls %s: NextProtos (-want +got) %s, MinVersion %x want %x", v, diff, c.MinVersion, want)
		}
	}
}
