package ports

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/notiflow/notiflow/lib/templates"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
)

// maxTemplateBody bounds a template request's body.
const maxTemplateBody = templates.MaxBodyLen + templates.MaxSubjectLen + 16<<10

// templateError maps the templates service's errors (a httpapi.ErrorMap).
func templateError(err error) (int, string, bool) {
	var fe *templates.FieldError
	switch {
	case errors.As(err, &fe):
		return http.StatusBadRequest, fe.Error(), true
	case errors.Is(err, app.ErrTemplateNotFound):
		return http.StatusNotFound, "template not found", true
	case errors.Is(err, app.ErrTemplateExists):
		return http.StatusConflict, "name: " + detail(err, app.ErrTemplateExists), true
	case errors.Is(err, app.ErrTemplateInUse):
		return http.StatusConflict, detail(err, app.ErrTemplateInUse), true
	case errors.Is(err, app.ErrTemplateBreaksTargets):
		return http.StatusConflict, detail(err, app.ErrTemplateBreaksTargets), true
	}
	return 0, "", false
}

// detail returns what err says after the sentinel's text.
func detail(err, sentinel error) string {
	s := err.Error()
	if i := strings.Index(s, sentinel.Error()+": "); i >= 0 {
		return s[i+len(sentinel.Error())+2:]
	}
	return sentinel.Error()
}

// templateRequest is a managed template as clients send it; on PUT the
// name comes from the path (a name in the body must match it).
type templateRequest struct {
	Name    string   `json:"name"`
	Channel string   `json:"channel"`
	Subject string   `json:"subject"`
	Body    string   `json:"body"`
	Params  []string `json:"params"`
}

// templateView is a managed template as clients receive it.
type templateView struct {
	Name      string    `json:"name"`
	Channel   string    `json:"channel,omitempty"`
	Subject   string    `json:"subject,omitempty"`
	Body      string    `json:"body"`
	Params    []string  `json:"params"`
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func viewTemplate(r app.TemplateRecord) templateView {
	p := r.Params
	if p == nil {
		p = []string{}
	}
	return templateView{Name: r.Name, Channel: r.Channel, Subject: r.Subject, Body: r.Body, Params: p,
		Version: r.Version, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

func (t templateRequest) template() templates.Template {
	return templates.Template{Name: t.Name, Channel: t.Channel, Subject: t.Subject, Body: t.Body, Params: t.Params}
}

func (a *API) registerTemplates(mux Mux) {
	g := a.tguard
	mux.Handle("POST /v1/templates", g.Handle(a.createTemplate))
	mux.Handle("GET /v1/templates", g.Handle(a.listTemplates))
	mux.Handle("GET /v1/templates/{name}", g.Handle(a.getTemplate))
	mux.Handle("PUT /v1/templates/{name}", g.Handle(a.updateTemplate))
	mux.Handle("DELETE /v1/templates/{name}", g.Handle(a.deleteTemplate))
}

func (a *API) createTemplate(w http.ResponseWriter, r *http.Request) error {
	var req templateRequest
	if err := decode(w, r, maxTemplateBody, &req); err != nil {
		return err
	}
	rec, err := a.opts.Templates.Create(r.Context(), req.template())
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/templates/"+rec.Name)
	writeJSON(w, http.StatusCreated, viewTemplate(rec))
	return nil
}

func (a *API) listTemplates(w http.ResponseWriter, r *http.Request) error {
	recs, err := a.opts.Templates.List(r.Context())
	if err != nil {
		return err
	}
	out := struct {
		Templates []templateView `json:"templates"`
	}{Templates: make([]templateView, len(recs))}
	for i, rec := range recs {
		out.Templates[i] = viewTemplate(rec)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) getTemplate(w http.ResponseWriter, r *http.Request) error {
	rec, err := a.opts.Templates.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewTemplate(rec))
	return nil
}

func (a *API) updateTemplate(w http.ResponseWriter, r *http.Request) error {
	var req templateRequest
	if err := decode(w, r, maxTemplateBody, &req); err != nil {
		return err
	}
	name := r.PathValue("name")
	if req.Name != "" && req.Name != name {
		return badRequest("name: %q does not match the path's %q (a template cannot be renamed)", req.Name, name)
	}
	req.Name = name
	rec, err := a.opts.Templates.Update(r.Context(), req.template())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewTemplate(rec))
	return nil
}

func (a *API) deleteTemplate(w http.ResponseWriter, r *http.Request) error {
	if err := a.opts.Templates.Delete(r.Context(), r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
