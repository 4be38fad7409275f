package ports

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Limits of GET /admin/notifications.
const (
	defaultNotificationsLimit = 20
	maxNotificationsLimit     = 100
	// maxRecipientLen is the sink's recipient_id column length.
	maxRecipientLen = 191
	// maxSinkAnswer bounds the sink answer relayed to the page.
	maxSinkAnswer = 4 << 20
	// sinkTimeout bounds one query to the sink.
	sinkTimeout = 10 * time.Second
)

// SinkAPI is where the admin page's notifications panel reads from: the
// sink's read API (GET /v1/notifications) at BaseURL, called with Token as
// its bearer token. The zero value means not configured.
type SinkAPI struct {
	BaseURL string // e.g. http://sink:8082; validated by the config (NOTIFLOW_SINK_API_URL)
	Token   string
	Client  *http.Client // nil: a client with a 10 s timeout
}

// WithSinkAPI makes GET /admin/notifications relay to api; without it the
// route answers 503 (not configured). It returns h.
func (h *Handler) WithSinkAPI(api SinkAPI) *Handler {
	if api.Client == nil {
		api.Client = &http.Client{Timeout: sinkTimeout}
	}
	h.sink = api
	return h
}

// notifications serves GET /admin/notifications?target_id=N|recipient_id=R
// &limit=L: the last notifications of one target or recipient, newest
// first, as the sink's GET /v1/notifications answers them; 503 (whatever
// the query) when the sink API is not configured. The page stays
// same-origin: the scheduler calls the sink with the token, the browser
// never does.
func (h *Handler) notifications(w http.ResponseWriter, r *http.Request) error {
	if h.sink.BaseURL == "" {
		return &httpError{Status: http.StatusServiceUnavailable,
			Msg: "the sink API is not configured: set NOTIFLOW_SINK_API_URL on the scheduler to the sink's HTTP address"}
	}
	q, err := notificationsQuery(r.URL.Query())
	if err != nil {
		return err
	}
	status, body, err := h.sink.get(r.Context(), "/v1/notifications?"+q.Encode())
	if err != nil {
		return &httpError{Status: http.StatusBadGateway, Msg: "sink API (NOTIFLOW_SINK_API_URL) unreachable: " + err.Error()}
	}
	if status != http.StatusOK {
		return &httpError{Status: http.StatusBadGateway, Msg: fmt.Sprintf("sink API answered %d: %s", status, sinkMessage(status, body))}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(body)
	return err
}

// notificationsQuery checks the page's query and returns the sink's: one of
// target_id (a positive integer) or recipient_id, and limit.
func notificationsQuery(in url.Values) (url.Values, error) {
	out := url.Values{}
	target, recipient := in.Get("target_id"), in.Get("recipient_id")
	switch {
	case target != "" && recipient != "":
		return nil, badRequest("target_id, recipient_id: give one of them, not both")
	case target != "":
		if n, err := strconv.ParseUint(target, 10, 64); err != nil || n == 0 {
			return nil, badRequest("target_id: must be a positive integer, got %q", target)
		}
		out.Set("target_id", target)
	case recipient != "":
		if len(recipient) > maxRecipientLen {
			return nil, badRequest("recipient_id: must be at most %d bytes", maxRecipientLen)
		}
		out.Set("recipient_id", recipient)
	default:
		return nil, badRequest("target_id or recipient_id: one of them is required")
	}
	limit := defaultNotificationsLimit
	if s := in.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxNotificationsLimit {
			return nil, badRequest("limit: must be an integer between 1 and %d", maxNotificationsLimit)
		}
		limit = n
	}
	out.Set("limit", strconv.Itoa(limit))
	return out, nil
}

// get calls the sink and returns its status and (bounded) body.
func (s SinkAPI) get(ctx context.Context, pathAndQuery string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, sinkTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(s.BaseURL, "/")+pathAndQuery, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if s.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.Token)
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSinkAnswer+1))
	if err != nil {
		return 0, nil, fmt.Errorf("read answer: %w", err)
	}
	if len(body) > maxSinkAnswer {
		return 0, nil, fmt.Errorf("answer larger than %d bytes", maxSinkAnswer)
	}
	return resp.StatusCode, body, nil
}

// sinkMessage is the error text of a sink answer that is not 200.
func sinkMessage(status int, body []byte) string {
	if status == http.StatusUnauthorized {
		return "the sink refused the scheduler's token (the sink's NOTIFLOW_API_TOKEN must be the scheduler's)"
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return http.StatusText(status)
}
