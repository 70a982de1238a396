package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// certFiles writes the serving certificate the rotator keeps in its Secret
// into --cert-dir (an emptyDir) as soon as the Secret holds one, and again
// whenever it changes. Mounted as a Secret volume instead, a fresh install
// waited minutes for its listener: the kubelet updates a mounted Secret only
// at its next sync, and cert-controller looks for the files with a doubling
// backoff (1 s, 2 s, 4 s, ... with jitter).
type certFiles struct {
	cache cache.Cache
	// secret is the Secret's name; the cache watches only that one, in the
	// webhook's namespace (main's ByObject).
	secret string
	dir    string
	log    logr.Logger
}

// certFileKeys are the Secret's keys written to the directory: the pair the
// webhook and metrics servers load (cert-controller's default names). The
// CA's key stays in the Secret.
var certFileKeys = []string{"tls.key", "tls.crt"}

func (c *certFiles) Start(ctx context.Context) error {
	inf, err := c.cache.GetInformer(ctx, &corev1.Secret{})
	if err != nil {
		return fmt.Errorf("watching the certificate Secret %s: %w", c.secret, err)
	}
	write := func(obj any) {
		s, ok := obj.(*corev1.Secret)
		if !ok || s.Name != c.secret {
			return
		}
		if err := c.write(s.Data); err != nil {
			c.log.Error(err, "writing the serving certificate", "secret", c.secret, "dir", c.dir)
		}
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    write,
		UpdateFunc: func(_, obj any) { write(obj) },
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return inf.RemoveEventHandler(reg)
}

// NeedLeaderElection: every replica serves, so every replica needs the files.
func (c *certFiles) NeedLeaderElection() bool { return false }

// write puts each key of data that differs from its file in place by a
// rename, so a reader never sees half a file. Between the two renames the
// files hold a pair that does not match, which certwatcher refuses, so it
// serves the previous pair until the second. An empty Secret (as shipped,
// before the rotator fills it) writes nothing.
func (c *certFiles) write(data map[string][]byte) error {
	for _, k := range certFileKeys {
		if len(data[k]) == 0 {
			return nil
		}
	}
	for _, k := range certFileKeys {
		path := filepath.Join(c.dir, k)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data[k]) {
			continue
		}
		tmp, err := os.CreateTemp(c.dir, "."+k+"-*")
		if err != nil {
			return err
		}
		_, err = tmp.Write(data[k])
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			_ = os.Remove(tmp.Name())
			return err
		}
		c.log.Info("wrote the serving certificate's file", "file", path)
	}
	return nil
}
