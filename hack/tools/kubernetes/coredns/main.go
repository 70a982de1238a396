// Command coredns is CoreDNS v1.14.6 with only the plugins of the Corefile
// kubeadm v1.37 installs (errors, health, ready, kubernetes, prometheus,
// forward, cache, loop, reload, loadbalance) plus log. The offline kind node
// image (hack/kind/node-image.sh) packs it as the coredns image kubeadm
// names. Leaving out the cloud plugins (route53, azure, clouddns, dnstap,
// the tracers) keeps their SDKs out of the build: the same CoreDNS core,
// a fraction of the compile time.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }
