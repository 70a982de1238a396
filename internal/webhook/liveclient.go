package webhook

import (
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NewLiveReader returns the client CachedOwners reads owners through, and
// a function that closes every connection it has open.
//
// It is not the manager's APIReader: that one shares its transport (and,
// over HTTP/2, its one connection) with the informers' watches, and no
// caller can drop a connection of it that stopped answering. This one dials
// through its own connrotation.Dialer (client-go; the kubelet does the same
// to leave a connection whose heartbeats go unanswered), so that the
// transport is its own (client-go does not share transports across custom
// dialers) and a read that hung can be retried on a new connection.
func NewLiveReader(cfg *rest.Config, scheme *runtime.Scheme, mapper meta.RESTMapper) (client.Reader, func(), error) {
	dialer := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	live := rest.CopyConfig(cfg)
	live.Dial = dialer.DialContext
	c, err := client.New(live, client.Options{Scheme: scheme, Mapper: mapper})
	if err != nil {
		return nil, nil, fmt.Errorf("creating the client for live owner reads: %w", err)
	}
	return c, dropAtMostEvery(DefaultLiveAttemptTimeout/4, dialer.CloseAll), nil
}

// dropAtMostEvery calls closeAll unless it ran less than interval ago.
// Requests hung on one dead connection time out together; the first drop
// closes that connection (and every other open one), so the others' drops
// would only close the fresh connections the first one's retry just made.
// A request whose attempt timed out started at least an attempt timeout
// ago, so a drop within the last interval has closed its connection too.
func dropAtMostEvery(interval time.Duration, closeAll func()) func() {
	var last atomic.Int64 // UnixNano of the last drop
	return func() {
		now := time.Now().UnixNano()
		prev := last.Load()
		if now-prev < int64(interval) || !last.CompareAndSwap(prev, now) {
			return
		}
		closeAll()
	}
}
