package deploytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// docCurl is one curl command shown in a fenced code block of a document.
type docCurl struct {
	file string
	line int
	cmd  string
}

// docCurls returns the curl commands of the repository's tracked Markdown
// files, continuation lines joined.
func docCurls(tb testing.TB, root string) []docCurl {
	tb.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "*.md").Output()
	if err != nil {
		tb.Fatalf("git ls-files: %v", err)
	}
	var cmds []docCurl
	for _, rel := range strings.Fields(string(out)) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			tb.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		inBlock, n, start := false, 0, 0
		var cur strings.Builder
		for sc.Scan() {
			n++
			line := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inBlock = !inBlock
				continue
			}
			if !inBlock {
				continue
			}
			if cur.Len() == 0 {
				if !strings.HasPrefix(strings.TrimSpace(line), "curl ") {
					continue
				}
				start = n
			}
			if s, ok := strings.CutSuffix(strings.TrimRight(line, " "), `\`); ok {
				cur.WriteString(s + " ")
				continue
			}
			cur.WriteString(line)
			cmds = append(cmds, docCurl{file: rel, line: start, cmd: strings.TrimSpace(cur.String())})
			cur.Reset()
		}
	}
	return cmds
}

// docAPI answers like the services' API to what matters for a documented
// command: the bearer token (every route, httpapi.Guard), and a body sent
// as application/json (httpapi.Decode answers 415 to anything else, such
// as curl -d's default application/x-www-form-urlencoded) that is JSON.
type docAPI struct {
	token string
	mu    sync.Mutex
	seen  []string // one verdict per request: "" accepted, else why not
}

func (a *docAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	verdict := ""
	switch {
	case r.Header.Get("Authorization") != "Bearer "+a.token:
		verdict = fmt.Sprintf("401: Authorization %q is not the bearer token", r.Header.Get("Authorization"))
	case len(body) > 0:
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		switch {
		case err != nil || mt != "application/json":
			verdict = fmt.Sprintf("415: Content-Type %q with a body; the API takes application/json", r.Header.Get("Content-Type"))
		case !json.Valid(body):
			verdict = fmt.Sprintf("400: body %q is not JSON", body)
		}
	}
	a.mu.Lock()
	a.seen = append(a.seen, verdict)
	a.mu.Unlock()
	if verdict != "" {
		http.Error(w, verdict, http.StatusBadRequest)
	}
}

func (a *docAPI) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.seen
	a.seen = nil
	return s
}

var (
	// docHostPattern matches the local addresses the documents send to.
	docHostPattern = regexp.MustCompile(`(https?://)?(localhost|127\.0\.0\.1):[0-9]+`)
	docTokenVars   = []string{"TOKEN", "NOTIFLOW_API_TOKEN"}
)

// TestDocumentedCurlCommands runs every curl command the documents show
// (real curl, through bash, as a reader pastes it) against a server that
// accepts what the API accepts: the bearer token from the variable the
// document sets, and JSON bodies sent as application/json.
func TestDocumentedCurlCommands(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("curl is required to check the documented commands and was not found on PATH: %v", err)
	}
	api := &docAPI{token: "doc-test-token"}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	cmds := docCurls(t, repoRoot(t))
	var benchmarkPost bool
	for _, c := range cmds {
		cmd := docHostPattern.ReplaceAllString(c.cmd, srv.URL)
		cmd = strings.ReplaceAll(cmd, "<id>", "0b8e8f1e-2c2d-4c1e-9a57-4b7d3c8e9f10")
		cmd = strings.Replace(cmd, "curl ", curl+" --max-time 30 -sS -o /dev/null ", 1)
		sh := exec.Command("bash", "-c", cmd)
		sh.Env = os.Environ()
		for _, v := range docTokenVars {
			sh.Env = append(sh.Env, v+"="+api.token)
		}
		out, err := sh.CombinedOutput()
		if err != nil {
			t.Errorf("%s:%d: %s: %v\n%s", c.file, c.line, c.cmd, err, out)
			continue
		}
		seen := api.take()
		if len(seen) != 1 {
			t.Errorf("%s:%d: %s: reached the server %d times, want once (is the address localhost:PORT?)", c.file, c.line, c.cmd, len(seen))
			continue
		}
		if seen[0] != "" {
			t.Errorf("%s:%d: %s: the API would refuse it: %s", c.file, c.line, c.cmd, seen[0])
		}
		benchmarkPost = benchmarkPost || (c.file == "deploy/k8s/README.md" && strings.Contains(c.cmd, "/admin/benchmarks") && strings.Contains(c.cmd, "-d "))
	}
	t.Logf("%d documented curl commands accepted or reported", len(cmds))
	if !benchmarkPost {
		t.Errorf("deploy/k8s/README.md shows no POST /admin/benchmarks curl command (the runbook's benchmark); found %d curl commands in all", len(cmds))
	}
}
