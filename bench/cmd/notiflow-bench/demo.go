package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/notiflow/notiflow/bench/harness"
	"github.com/notiflow/notiflow/lib/testkit"
)

// cmdDemo starts the dependencies and the services on their usual ports,
// creates a few real targets, runs a benchmark, prints the report and the
// admin page URL, and keeps everything running until Ctrl-C.
func cmdDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var o options
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Channel == channelWebhook {
		return fmt.Errorf("channel %s: the demo drives sim or inbox (make bench CHANNEL=webhook runs the webhook benchmark)", channelWebhook)
	}
	if o.Profile != "" {
		return fmt.Errorf("profile %s: the demo takes no profiles (make bench PROFILE=dir does)", o.Profile)
	}
	root, err := harness.Root()
	if err != nil {
		return err
	}
	wasRunning := harness.DepsRunning(ctx, root)
	if err := harness.DepsUp(ctx, root); err != nil {
		return err
	}
	if !wasRunning { // the demo started them, so it stops them too
		defer func() { _ = harness.DepsDown(context.Background(), root) }()
	}
	binDir := filepath.Join(root, "bin")
	fmt.Println("building the services")
	if err := harness.Build(ctx, root, binDir); err != nil {
		return err
	}
	deps := harness.LocalDeps()
	iso := harness.NewIsolation("demo")
	if err := iso.Create(ctx, deps); err != nil {
		return err
	}
	token := randomToken()
	base, err := iso.Env(deps, o.Partitions, token)
	if err != nil {
		return err
	}
	stack, err := harness.NewStack(binDir, filepath.Join(root, "bench", "results", "logs", "demo"), base)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("\nstopping the services")
		stack.StopAll(30 * time.Second)
		_ = iso.DeleteTopics(context.Background(), deps)
	}()
	addrs := map[string]string{"scheduler": "127.0.0.1:8080", "sink": "127.0.0.1:8082"}
	for i := 1; i <= o.Dispatchers; i++ {
		addrs[fmt.Sprintf("dispatcher-%d", i)] = fmt.Sprintf("127.0.0.1:%d", 8080+2*i-1) // 8081, 8083, ...
	}
	sched, err := startTrio(ctx, stack, iso, o, addrs)
	if err != nil {
		return err
	}
	recv, err := testkit.StartReceiver(nil)
	if err != nil {
		return err
	}
	defer recv.Close()
	admin := &harness.Admin{Base: "http://" + sched.Addr, Token: token}

	soon := time.Now().Add(10 * time.Second).UTC().Format(time.RFC3339)
	later := time.Now().Add(2 * time.Minute).UTC().Format(time.RFC3339)
	samples := []map[string]any{
		{"recipient_id": "alice", "channel": "inbox", "template_id": "reminder", "params": map[string]any{"name": "Alice", "what": "stand-up"}, "cron": "* * * * *", "time_zone": "Europe/Berlin"},
		{"recipient_id": "bob", "channel": "inbox", "template_id": "welcome", "params": map[string]any{"name": "Bob"}, "due_at": soon},
		{"recipient_id": "carol", "channel": "inbox", "template_id": "welcome", "params": map[string]any{"name": "Carol"}, "due_at": later},
		{"recipient_id": "dave", "channel": "webhook", "webhook_url": recv.URL + "/hook", "template_id": "welcome", "params": map[string]any{"name": "Dave"}, "due_at": soon},
	}
	for _, s := range samples {
		var created json.RawMessage
		if err := admin.Do(ctx, http.MethodPost, "/v1/targets", s, &created); err != nil {
			return fmt.Errorf("create sample target: %w", err)
		}
		fmt.Printf("created target %s\n", created)
	}

	run, err := admin.StartBenchmark(ctx, harness.BenchmarkRequest{
		Notifications: o.Notifications, Recipients: o.Recipients, Channel: o.Channel,
		SimLatencyMs: int(o.SimLatency / time.Millisecond),
	})
	if err != nil {
		return err
	}
	fmt.Printf("benchmark run %s started\n", run.ID)
	run, err = follow(ctx, admin, run.ID, o.Timeout, nil)
	if err != nil {
		return err
	}
	if run.Report != nil {
		printReport("demo benchmark", &result{Config: o, Run: run})
	}
	fmt.Printf("\nadmin page:  http://%s/admin/   (token: %s)\n", sched.Addr, token)
	fmt.Printf("targets API: http://%s/v1/targets  (Authorization: Bearer <token>)\n", sched.Addr)
	fmt.Printf("webhook receiver has %d call(s) so far; the recurring target fires every minute.\n", len(recv.Calls()))
	fmt.Println("running until Ctrl-C")
	<-ctx.Done()
	return nil
}
