package fence

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// request is one HTTP request the fake API server received.
type request struct {
	Method      string
	Path        string // /apis/<group>/<version>/[namespaces/<ns>/]<resource>/<name>
	ContentType string
	Body        string
}

// reply is a canned answer; status 0 means "handle normally".
type reply struct {
	status int
	body   any
}

// fakeAPI is an API server over real HTTP, with the semantics the client
// depends on: resourceVersion on every write, RFC 6902 test ops failing with
// a generic 422, merge patches, DELETE preconditions failing with 409,
// AlreadyExists on POST. Hooks run before the normal handling and may change
// the store (a concurrent writer) or answer themselves (admission).
type fakeAPI struct {
	t        *testing.T
	mu       sync.Mutex
	objects  map[string]map[string]any // path -> object
	rv       int
	requests []request
	hooks    []hook
}

type hook struct {
	method, resource string
	times            int // how many requests it still handles
	fn               func(f *fakeAPI, r request) reply
}

func newFakeAPI(t *testing.T) (*fakeAPI, dynamic.Interface) {
	f := &fakeAPI{t: t, objects: map[string]map[string]any{}, rv: 1000}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return f, dyn
}

func objectPath(resource, namespace, name string) string {
	gvr := map[string]string{
		"sandboxes":                         SandboxGVR.GroupVersion().String(),
		"sandboxclaims":                     SandboxClaimGVR.GroupVersion().String(),
		"ciliumnetworkpolicies":             CiliumNetworkPolicyGVR.GroupVersion().String(),
		"validatingadmissionpolicies":       validatingAdmissionPolicyGVR.GroupVersion().String(),
		"validatingadmissionpolicybindings": validatingAdmissionPolicyBindingGVR.GroupVersion().String(),
	}[resource]
	if namespace == "" {
		return "/apis/" + gvr + "/" + resource + "/" + name
	}
	return "/apis/" + gvr + "/namespaces/" + namespace + "/" + resource + "/" + name
}

// put stores obj (a fixture) under its path, assigning a resourceVersion
// unless it has one.
func (f *fakeAPI) put(resource string, obj *unstructured.Unstructured) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if obj.GetResourceVersion() == "" {
		f.rv++
		obj.SetResourceVersion(strconv.Itoa(f.rv))
	}
	f.objects[objectPath(resource, obj.GetNamespace(), obj.GetName())] = roundTrip(obj.Object)
}

func (f *fakeAPI) get(resource, namespace, name string) *unstructured.Unstructured {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.objects[objectPath(resource, namespace, name)]
	if !ok {
		return nil
	}
	return &unstructured.Unstructured{Object: roundTrip(o)}
}

// touch is a concurrent writer: it applies change to the stored object and
// moves its resourceVersion. Call it from hooks (the lock is held).
func (f *fakeAPI) touch(path string, change func(u *unstructured.Unstructured)) {
	u := &unstructured.Unstructured{Object: f.objects[path]}
	change(u)
	f.rv++
	u.SetResourceVersion(strconv.Itoa(f.rv))
}

func (f *fakeAPI) on(method, resource string, times int, fn func(f *fakeAPI, r request) reply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hooks = append(f.hooks, hook{method, resource, times, fn})
}

// sent returns the requests with this method, in order.
func (f *fakeAPI) sent(method string) []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []request
	for _, r := range f.requests {
		if r.Method == method {
			out = append(out, r)
		}
	}
	return out
}

// list answers a GET of a collection path (one that ends in a resource the
// store knows): the stored objects under it, in path order.
func (f *fakeAPI) list(path string) ([]any, bool) {
	resource := path[strings.LastIndexByte(path, '/')+1:]
	if objectPath(resource, "x", "x") == "/apis//namespaces/x/"+resource+"/x" {
		return nil, false
	}
	var paths []string
	for p := range f.objects {
		if strings.HasPrefix(p, path+"/") && !strings.Contains(strings.TrimPrefix(p, path+"/"), "/") {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	items := []any{}
	for _, p := range paths {
		items = append(items, f.objects[p])
	}
	return items, true
}

func status(code int, reason, message string) reply {
	return reply{code, map[string]any{
		"kind": "Status", "apiVersion": "v1", "status": "Failure",
		"code": code, "reason": reason, "message": message,
	}}
}

// The message the apiserver sends for a failed test op.
const genericInvalid = "the server rejected our request due to an error in our request"

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, hr *http.Request) {
	body, _ := io.ReadAll(hr.Body)
	r := request{Method: hr.Method, Path: hr.URL.Path, ContentType: hr.Header.Get("Content-Type"), Body: string(body)}
	f.mu.Lock()
	f.requests = append(f.requests, r)
	rep := reply{}
	for i := range f.hooks {
		h := &f.hooks[i]
		if h.times > 0 && h.method == r.Method && strings.Contains(r.Path+"/", "/"+h.resource+"/") {
			h.times--
			rep = h.fn(f, r)
			break // one hook per request, in the order they were added
		}
	}
	if rep.status == 0 {
		rep = f.handle(r)
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.status)
	if err := json.NewEncoder(w).Encode(rep.body); err != nil {
		f.t.Errorf("encode reply: %v", err)
	}
}

func (f *fakeAPI) handle(r request) reply {
	obj, exists := f.objects[r.Path]
	name := r.Path[strings.LastIndexByte(r.Path, '/')+1:]
	switch r.Method {
	case http.MethodGet:
		if items, ok := f.list(r.Path); ok {
			return reply{http.StatusOK, map[string]any{"apiVersion": "v1", "kind": "List",
				"metadata": map[string]any{"resourceVersion": strconv.Itoa(f.rv)}, "items": items}}
		}
		if !exists {
			return status(http.StatusNotFound, "NotFound", fmt.Sprintf("%q not found", name))
		}
		return reply{http.StatusOK, obj}
	case http.MethodPost:
		var in map[string]any
		if err := json.Unmarshal([]byte(r.Body), &in); err != nil {
			return status(http.StatusBadRequest, "BadRequest", err.Error())
		}
		u := &unstructured.Unstructured{Object: in}
		path := r.Path + "/" + u.GetName()
		if _, ok := f.objects[path]; ok {
			return status(http.StatusConflict, "AlreadyExists", fmt.Sprintf("%q already exists", u.GetName()))
		}
		f.rv++
		u.SetResourceVersion(strconv.Itoa(f.rv))
		f.objects[path] = in
		return reply{http.StatusCreated, in}
	case http.MethodPatch:
		if !exists {
			return status(http.StatusNotFound, "NotFound", fmt.Sprintf("%q not found", name))
		}
		doc, _ := json.Marshal(obj)
		var out []byte
		var err error
		switch r.ContentType {
		case "application/json-patch+json":
			var p jsonpatch.Patch
			if p, err = jsonpatch.DecodePatch([]byte(r.Body)); err == nil {
				out, err = p.Apply(doc)
			}
		case "application/merge-patch+json":
			out, err = jsonpatch.MergePatch(doc, []byte(r.Body))
		default:
			return status(http.StatusUnsupportedMediaType, "UnsupportedMediaType", r.ContentType)
		}
		if err != nil {
			return status(http.StatusUnprocessableEntity, "Invalid", genericInvalid)
		}
		var next map[string]any
		_ = json.Unmarshal(out, &next)
		f.rv++
		(&unstructured.Unstructured{Object: next}).SetResourceVersion(strconv.Itoa(f.rv))
		f.objects[r.Path] = next
		return reply{http.StatusOK, next}
	case http.MethodDelete:
		if !exists {
			return status(http.StatusNotFound, "NotFound", fmt.Sprintf("%q not found", name))
		}
		var opts struct {
			Preconditions *struct {
				ResourceVersion *string `json:"resourceVersion"`
			} `json:"preconditions"`
		}
		if r.Body != "" {
			_ = json.Unmarshal([]byte(r.Body), &opts)
		}
		if opts.Preconditions != nil && opts.Preconditions.ResourceVersion != nil &&
			*opts.Preconditions.ResourceVersion != (&unstructured.Unstructured{Object: obj}).GetResourceVersion() {
			return status(http.StatusConflict, "Conflict", "Precondition failed: ResourceVersion")
		}
		delete(f.objects, r.Path)
		return reply{http.StatusOK, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Success"}}
	}
	return status(http.StatusMethodNotAllowed, "MethodNotAllowed", r.Method)
}
