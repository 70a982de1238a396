package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cmtypes "github.com/cilium/cilium/pkg/clustermesh/types"
	"github.com/cilium/cilium/pkg/crypto/certificatemanager"
	"github.com/cilium/cilium/pkg/defaults"
	envoypolicy "github.com/cilium/cilium/pkg/envoy/policy"
	"github.com/cilium/cilium/pkg/fqdn"
	ciliumdns "github.com/cilium/cilium/pkg/fqdn/dns"
	"github.com/cilium/cilium/pkg/fqdn/namemanager"
	"github.com/cilium/cilium/pkg/identity"
	"github.com/cilium/cilium/pkg/identity/identitymanager"
	"github.com/cilium/cilium/pkg/ipcache"
	ipcachetypes "github.com/cilium/cilium/pkg/ipcache/types"
	k8sconst "github.com/cilium/cilium/pkg/k8s/apis/cilium.io"
	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	k8sutils "github.com/cilium/cilium/pkg/k8s/utils"
	"github.com/cilium/cilium/pkg/labels"
	"github.com/cilium/cilium/pkg/labelsfilter"
	"github.com/cilium/cilium/pkg/option"
	"github.com/cilium/cilium/pkg/policy"
	"github.com/cilium/cilium/pkg/policy/api"
	"github.com/cilium/cilium/pkg/policy/types"
	policyutils "github.com/cilium/cilium/pkg/policy/utils"
	"github.com/cilium/cilium/pkg/source"
	testcertificatemanager "github.com/cilium/cilium/pkg/testutils/certificatemanager"
	testidentity "github.com/cilium/cilium/pkg/testutils/identity"
	testpolicy "github.com/cilium/cilium/pkg/testutils/policy"
	"github.com/cilium/cilium/pkg/u8proto"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fence/sandbox-fence/e2e/ciliumproof/reach/protocol"
)

// clusterName is the agent's default cluster-name ("default"), which Parse
// adds to every toEndpoints selector that names no cluster
// (policy-default-local-cluster) and every pod carries as a label.
const clusterName = defaults.ClusterName

// firstPodID is the numeric identity of the request's first pod; the rest
// follow. Far from the reserved identities (1-14) and below the local scope
// of CIDR and FQDN identities (1<<24).
const firstPodID = 1000

// configure does what the agent does once at start, under its defaults:
// enforcement "default", the entity "cluster" meaning the agent's own
// cluster, the default identity-relevant label prefixes. Both address
// families are on, so that IPv6 answers get identities as IPv4 ones do.
var configure = sync.OnceValue(func() error {
	option.Config.EnableIPv4, option.Config.EnableIPv6 = true, true
	policy.SetPolicyEnabled(option.DefaultEnforcement)
	api.InitEntities(clusterName)
	return labelsfilter.ParseLabelPrefixCfg(quiet, nil, nil, "")
})

// baselines holds each baseline file parsed, by path: one test run sends the
// same one with every request.
var baselines sync.Map // path -> baseline

type baseline struct {
	entries types.PolicyEntries
	rid     ipcachetypes.ResourceID
}

func loadBaseline(path string) (baseline, error) {
	if b, ok := baselines.Load(path); ok {
		return b.(baseline), nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return baseline{}, err
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return baseline{}, fmt.Errorf("%s: %w", path, err)
	}
	// A CiliumClusterwideNetworkPolicy is parsed as the agent parses one: a
	// CiliumNetworkPolicy without namespace, so no selector is narrowed to
	// one.
	var ccnp ciliumv2.CiliumClusterwideNetworkPolicy
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &ccnp); err != nil {
		return baseline{}, fmt.Errorf("%s: %w", path, err)
	}
	if ccnp.Kind != "CiliumClusterwideNetworkPolicy" {
		return baseline{}, fmt.Errorf("%s: kind %q, want CiliumClusterwideNetworkPolicy", path, ccnp.Kind)
	}
	rules, err := ccnp.Parse(quiet, clusterName)
	if err != nil {
		return baseline{}, fmt.Errorf("%s: Cilium refuses it: %w", path, err)
	}
	b := baseline{entries: policyutils.RulesToPolicyEntries(rules),
		rid: ipcachetypes.NewResourceID(ipcachetypes.ResourceKindCCNP, "", ccnp.Name)}
	baselines.Store(path, b)
	return b, nil
}

// parsePolicy decodes a CiliumNetworkPolicy as the agent's informer does
// (case-sensitive JSON into the typed object; unknown fields are dropped,
// as the API server's pruning drops them) and parses it, which runs
// Rule.Sanitize on every rule.
func parsePolicy(raw []byte) (api.Rules, ipcachetypes.ResourceID, error) {
	var cnp ciliumv2.CiliumNetworkPolicy
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &cnp); err != nil {
		return nil, "", fmt.Errorf("decode: %w", err)
	}
	rules, err := cnp.Parse(quiet, clusterName)
	if err != nil {
		return nil, "", err
	}
	return rules, ipcachetypes.NewResourceID(ipcachetypes.ResourceKindCNP, cnp.Namespace, cnp.Name), nil
}

// dropped lists the egress peers the agent fills in from cluster state
// before its repository sees the rule: toServices (from Services and their
// backends), toGroups (from a cloud provider), toRequires. Offline they
// select nothing, which must not read as "reaches nothing".
func dropped(rules api.Rules) []string {
	var out []string
	for i, r := range rules {
		for j, eg := range r.Egress {
			out = appendDropped(out, fmt.Sprintf("rule %d egress %d", i, j), eg.EgressCommonRule)
		}
		for j, eg := range r.EgressDeny {
			out = appendDropped(out, fmt.Sprintf("rule %d egressDeny %d", i, j), eg.EgressCommonRule)
		}
	}
	return out
}

func appendDropped(out []string, where string, c api.EgressCommonRule) []string {
	if len(c.ToServices) > 0 {
		out = append(out, where+": toServices (the agent resolves them from the cluster's Services)")
	}
	if len(c.ToGroups) > 0 {
		out = append(out, where+": toGroups (the agent resolves them from a cloud provider)")
	}
	if len(c.ToRequires) > 0 {
		out = append(out, where+": toRequires")
	}
	return out
}

// podIdentity derives a pod's identity labels as the agent does: the pod's
// labels sanitized (namespace, namespace labels, service account and
// cluster added) and filtered to the identity-relevant ones.
func podIdentity(id identity.NumericIdentity, p protocol.Pod) *identity.Identity {
	cluster := p.Cluster
	if cluster == "" {
		cluster = clusterName
	}
	m := k8sutils.SanitizePodLabels(maps.Clone(p.Labels), namespace{p.Namespace, p.NamespaceLabels}, p.ServiceAccount, cluster)
	lbls, _ := labelsfilter.Filter(labels.Map2Labels(m, labels.LabelSourceK8s))
	return identity.NewIdentity(id, lbls)
}

type namespace struct {
	name   string
	labels map[string]string
}

func (n namespace) GetName() string              { return n.name }
func (n namespace) GetLabels() map[string]string { return n.labels }

// identityUpdater is the ipcache's hand into the repository: a CIDR or FQDN
// identity the ipcache allocates reaches both selector caches.
type identityUpdater struct{ repo *policy.Repository }

func (u identityUpdater) UpdateIdentities(added, deleted identity.IdentityMap) <-chan struct{} {
	var wg sync.WaitGroup
	u.repo.GetSelectorCache().UpdateIdentities(added, deleted, &wg)
	wg.Wait()
	u.repo.UpdateIdentities(added, deleted)
	done := make(chan struct{})
	close(done)
	return done
}

// answer builds a fresh agent state for the request, as the agent's
// components would hold it, and looks the flows up in the endpoint policies.
func answer(ctx context.Context, req protocol.Request) protocol.Answer {
	ans, err := evaluate(ctx, req)
	if err != nil {
		return protocol.Answer{ID: req.ID, Error: err.Error()}
	}
	ans.ID = req.ID
	return ans
}

func evaluate(ctx context.Context, req protocol.Request) (protocol.Answer, error) {
	ans := protocol.Answer{Peers: map[string]protocol.Resolved{}, Unresolved: map[string]string{}}
	if err := configure(); err != nil {
		return ans, err
	}
	var (
		base baseline
		err  error
	)
	if req.Baseline != "" {
		if base, err = loadBaseline(req.Baseline); err != nil {
			return ans, fmt.Errorf("baseline: %w", err)
		}
	}
	var (
		rules api.Rules
		rid   ipcachetypes.ResourceID
	)
	if len(req.Policy) > 0 && string(req.Policy) != "null" {
		if rules, rid, err = parsePolicy(req.Policy); err != nil {
			ans.ParseError = err.Error()
		}
		ans.Dropped = dropped(rules)
	}

	// The pods, and every reserved identity.
	pods := map[string]*identity.Identity{}
	initial := identity.ListReservedIdentities()
	for i, p := range req.Pods {
		if _, dup := pods[p.Name]; dup || p.Name == "" {
			return ans, fmt.Errorf("pod %q: names must be unique and non-empty", p.Name)
		}
		id := podIdentity(identity.NumericIdentity(firstPodID+i), p)
		pods[p.Name] = id
		initial[id.ID] = id.LabelArray
	}

	idmgr := identitymanager.NewIDManager(quiet)
	// TLS secrets (terminatingTLS, originatingTLS) resolve to fakes: what
	// matters here is that such a port is redirected to the proxy.
	repo := policy.NewPolicyRepository(quiet, initial, &testcertificatemanager.Fake{},
		envoypolicy.NewEnvoyL7RulesTranslator(quiet, certificatemanager.NewMockSecretManagerInline()),
		idmgr, testpolicy.NewPolicyMetricsNoop())
	repo.UpdateIdentities(initial, nil)
	alloc := testidentity.NewMockIdentityAllocator(nil)
	ipc := ipcache.NewIPCache(&ipcache.Configuration{Context: ctx, Logger: quiet,
		IdentityAllocator: alloc, IdentityUpdater: identityUpdater{repo}})
	defer ipc.Shutdown()
	// New registers the name manager as the selector cache's FQDN notifier:
	// an FQDN selector a resolved policy uses is registered with it.
	nm := namemanager.New(namemanager.ManagerParams{Logger: quiet, PolicyRepo: repo, IPCache: ipc,
		Config: namemanager.NameManagerConfig{MinTTL: 1, DNSProxyLockCount: defaults.DNSProxyLockCount,
			EnableIPv4: true, EnableIPv6: true}})

	// What the agent's policy importer does with each policy: the CIDR
	// prefixes its selectors name go into the ipcache (so that an address
	// inside one gets an identity carrying its cidr: labels), then the
	// entries into the repository.
	imp := func(entries types.PolicyEntries, rid ipcachetypes.ResourceID) error {
		var mus []ipcache.MU
		for _, p := range policy.GetCIDRPrefixes(entries) {
			mus = append(mus, ipcache.MU{Prefix: cmtypes.NewLocalPrefixCluster(p), Source: source.CustomResource,
				Resource: rid, Metadata: []ipcache.IPMetadata{labels.GetCIDRLabels(p)}, IsCIDR: true})
		}
		if len(mus) > 0 {
			if err := ipc.WaitForRevision(ctx, ipc.UpsertMetadataBatch(mus...)); err != nil {
				return err
			}
		}
		repo.ReplaceByResource(entries, rid)
		return nil
	}
	if req.Baseline != "" {
		if err := imp(base.entries, base.rid); err != nil {
			return ans, err
		}
	}
	if ans.ParseError == "" && rules != nil {
		if err := imp(policyutils.RulesToPolicyEntries(rules), rid); err != nil {
			return ans, err
		}
	}

	// Each source pod's endpoint policy, resolved and kept attached as an
	// endpoint keeps it: this is what registers the FQDN selectors with the
	// name manager, and what receives the identities DNS answers create.
	epps := map[string]*policy.EndpointPolicy{}
	for _, l := range req.Lookups {
		for _, from := range l.From {
			if _, done := epps[from]; done {
				continue
			}
			id := pods[from]
			if id == nil {
				return ans, fmt.Errorf("lookup from %q: no such pod", from)
			}
			sp, _, err := repo.ComputeSelectorPolicy(id)
			if err != nil {
				// The agent cannot regenerate this endpoint: it never gets
				// the policy it was written for.
				ans.Unresolved[from] = err.Error()
				epps[from] = nil
				continue
			}
			epp := sp.DistillPolicy(quiet, owner{uint64(id.ID)}, map[string]uint16{policy.FallbackRedirectID: proxyPort})
			if err := epp.Ready(); err != nil {
				return ans, err
			}
			defer sp.Supersede()
			defer epp.Detach(quiet)
			epps[from] = epp
		}
	}

	// The DNS answers, as the DNS proxy hands them to the name manager; each
	// returns once the ipcache holds the identities it made.
	records := make([]*fqdn.DNSIPRecords, len(req.DNS))
	for i, a := range req.DNS {
		records[i] = &fqdn.DNSIPRecords{TTL: 3600}
		for _, s := range a.IPs {
			addr, err := netip.ParseAddr(s)
			if err != nil {
				return ans, fmt.Errorf("answer for %s: %w", a.Name, err)
			}
			records[i].IPs = append(records[i].IPs, addr)
		}
	}
	var waits []<-chan error
	for i, a := range req.DNS {
		waits = append(waits, nm.UpdateGenerateDNS(ctx, time.Now(), ciliumdns.FQDN(a.Name), records[i]))
	}
	var errs []error
	for _, w := range waits {
		errs = append(errs, <-w)
	}
	if err := errors.Join(errs...); err != nil {
		return ans, err
	}
	// The incremental changes the selector cache queued for each endpoint
	// policy, applied as the endpoint applies them.
	for _, epp := range epps {
		if epp == nil {
			continue
		}
		closer, _ := epp.ConsumeMapChanges()
		closer()
	}

	dp := datapathMap{}
	ipc.DumpToListener(dp)
	for _, l := range req.Lookups {
		var dests []identity.NumericIdentity
		for _, to := range l.To {
			id, err := resolve(ctx, to, pods, dp, alloc, &ans)
			if err != nil {
				return ans, err
			}
			dests = append(dests, id)
		}
		var ports []portProto
		for _, s := range l.Ports {
			pp, err := parsePort(s)
			if err != nil {
				return ans, err
			}
			ports = append(ports, pp)
		}
		for _, from := range l.From {
			epp := epps[from]
			for _, dest := range dests {
				for _, pp := range ports {
					if epp == nil {
						ans.Verdicts = append(ans.Verdicts, protocol.Verdict{})
						continue
					}
					e, meta, _ := epp.Lookup(policy.EgressKey().WithIdentity(dest).WithPortProto(pp.proto, pp.port))
					ans.Verdicts = append(ans.Verdicts, protocol.Verdict{Allowed: !e.IsDeny(), ProxyPort: e.ProxyPort, Rules: ruleNames(meta)})
				}
			}
		}
	}
	return ans, nil
}

// proxyPort is the port every redirect gets (the agent would ask its proxy
// for one per listener): non-zero means "redirected".
const proxyPort = 65535

// resolve finds a peer's numeric identity and records it in ans.Peers.
func resolve(ctx context.Context, p protocol.Peer, pods map[string]*identity.Identity, dp datapathMap, alloc *testidentity.MockIdentityAllocator, ans *protocol.Answer) (identity.NumericIdentity, error) {
	if r, ok := ans.Peers[p.Key()]; ok {
		return identity.NumericIdentity(r.Identity), nil
	}
	var (
		id     *identity.Identity
		prefix string
	)
	switch {
	case p.Pod != "" && p.Reserved == "" && p.IP == "":
		if id = pods[p.Pod]; id == nil {
			return 0, fmt.Errorf("peer pod %q: no such pod", p.Pod)
		}
	case p.Reserved != "" && p.Pod == "" && p.IP == "":
		nid := identity.GetReservedID(p.Reserved)
		if nid == identity.IdentityUnknown {
			return 0, fmt.Errorf("peer %q: no such reserved identity", p.Reserved)
		}
		id = identity.LookupReservedIdentity(nid)
	case p.IP != "" && p.Pod == "" && p.Reserved == "":
		addr, err := netip.ParseAddr(p.IP)
		if err != nil {
			return 0, fmt.Errorf("peer: %w", err)
		}
		var nid identity.NumericIdentity
		nid, prefix = dp.lpm(addr)
		if id = identity.LookupReservedIdentity(nid); id == nil {
			id = alloc.LookupIdentityByID(ctx, nid)
		}
		if id == nil {
			return 0, fmt.Errorf("peer %s: the ipcache maps it to identity %d, which the allocator does not know", p.IP, nid)
		}
	default:
		return 0, fmt.Errorf("peer %+v: want exactly one of pod, reserved, ip", p)
	}
	ans.Peers[p.Key()] = protocol.Resolved{Identity: uint32(id.ID), Labels: id.LabelArray.GetModel(), Prefix: prefix}
	return id.ID, nil
}

// datapathMap is the ipcache as the datapath's map holds it: every entry the
// ipcache hands its listeners (the map writer is one), by prefix.
type datapathMap map[netip.Prefix]identity.NumericIdentity

func (m datapathMap) OnIPIdentityCacheChange(mod ipcache.CacheModification, cidr cmtypes.PrefixCluster, _, _ net.IP,
	_ *ipcache.Identity, id ipcache.Identity, _ uint8, _ *ipcache.K8sMetadata, _ uint8) {
	if mod == ipcache.Upsert {
		m[cidr.AsPrefix()] = id.ID
	} else {
		delete(m, cidr.AsPrefix())
	}
}

// lpm resolves an address as the datapath does: the longest prefix of the
// map that holds it, else the world identity of its family (the entries
// the agent writes for 0.0.0.0/0 and ::/0 in dual-stack mode).
func (m datapathMap) lpm(addr netip.Addr) (identity.NumericIdentity, string) {
	for bits := addr.BitLen(); bits >= 0; bits-- {
		pfx := netip.PrefixFrom(addr, bits).Masked()
		if id, ok := m[pfx]; ok {
			return id, pfx.String()
		}
	}
	return identity.GetWorldIdentityFromIP(addr), ""
}

type portProto struct {
	proto u8proto.U8proto
	port  uint16
}

func parsePort(s string) (portProto, error) {
	proto, port, ok := strings.Cut(s, "/")
	n, err := strconv.ParseUint(port, 10, 16)
	if !ok || err != nil || n == 0 {
		return portProto{}, fmt.Errorf("port %q: want PROTO/PORT, PORT 1-65535", s)
	}
	p, err := u8proto.ParseProtocol(proto)
	if err != nil || p == u8proto.ANY {
		return portProto{}, fmt.Errorf("port %q: want TCP, UDP, SCTP or ICMP", s)
	}
	return portProto{p, uint16(n)}, nil
}

// ruleNames turns the labels of the rules behind a verdict into
// "Kind namespace/name".
func ruleNames(meta policy.RuleMeta) []string {
	var out []string
	for _, la := range meta.LabelArray() {
		get := func(key string) string { return la.Get(labels.LabelSourceK8sKeyPrefix + key) }
		name := get(k8sconst.PolicyLabelName)
		if ns := get(k8sconst.PolicyLabelNamespace); ns != "" {
			name = ns + "/" + name
		}
		out = append(out, strings.TrimSpace(get(k8sconst.PolicyLabelDerivedFrom)+" "+name))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
