package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
)

// Operator is the part of a Backend that operates kurmad itself rather
// than its pods and images.
type Operator interface {
	// Reload reads the config file again and applies the difference; a
	// config with problems changes nothing and is an error with
	// CodeInvalidConfig listing every one.
	Reload(ctx context.Context) (*ReloadResult, error)
	// PlanReload is what Reload would do now, applying nothing: the
	// same errors, and the result with DryRun set.
	PlanReload(ctx context.Context) (*ReloadResult, error)
	// RetryNetwork tries a network's failed generations again now (a fetch
	// waiting for its next attempt, a container waiting to restart) and
	// returns its generations.
	RetryNetwork(ctx context.Context, name string) ([]Generation, error)
	// RemovePod removes a pod even when its dels fail, and says what they
	// may have left.
	RemovePod(ctx context.Context, id string) (*PodRemoval, error)
}

// reload is POST /v1/reload, and with ?dry_run=true its plan.
func (s *Server) reload(w http.ResponseWriter, r *http.Request) {
	reload := s.backend.Reload
	for k, v := range r.URL.Query() {
		if k != "dry_run" {
			s.writeError(w, r, Errorf(CodeBadRequest, "unknown query parameter %q (POST /v1/reload takes dry_run=true)", k))
			return
		}
		dry, err := strconv.ParseBool(v[0])
		if err != nil {
			s.writeError(w, r, Errorf(CodeBadRequest, "dry_run=%q: want true or false", v[0]))
			return
		}
		if dry {
			reload = s.backend.PlanReload
		}
	}
	res, err := reload(r.Context())
	if err == nil && res == nil {
		err = errors.New("backend returned no reload result")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, res)
}

func (s *Server) retryNetwork(w http.ResponseWriter, r *http.Request) {
	nets, err := s.backend.RetryNetwork(r.Context(), r.PathValue("name"))
	writeList(s, w, r, nets, err)
}

// removePod is DELETE /v1/pods/{id}?force=true (or 1).
func (s *Server) removePod(w http.ResponseWriter, r *http.Request) {
	force, err := strconv.ParseBool(r.URL.Query().Get("force"))
	if err != nil {
		s.writeError(w, r, Errorf(CodeBadRequest, "force=%q: want true or false", r.URL.Query().Get("force")))
		return
	}
	if !force {
		r.URL.RawQuery = ""
		s.deletePod(w, r)
		return
	}
	res, err := s.backend.RemovePod(r.Context(), r.PathValue("id"))
	if err == nil && res == nil {
		err = errors.New("backend returned no removal")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if res.Left == nil {
		res.Left = []Leftover{}
	}
	s.writeJSON(w, r, http.StatusOK, res)
}

// Reload makes kurmad read its config file again and apply it.
func (c *Client) Reload(ctx context.Context) (*ReloadResult, error) {
	var res ReloadResult
	if err := c.call(ctx, routeReload.request(nil), nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// PlanReload asks kurmad what a reload would do now, applying nothing.
func (c *Client) PlanReload(ctx context.Context) (*ReloadResult, error) {
	var res ReloadResult
	if err := c.call(ctx, routeDryRunReload.request(nil), nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// RetryNetwork tries a network's failed generations again now.
func (c *Client) RetryNetwork(ctx context.Context, name string) ([]Generation, error) {
	var nets []Generation
	err := c.call(ctx, routeRetryNetwork.request(nil, name), nil, &nets)
	return nets, err
}

// RemovePod removes a pod by force: even when its dels fail.
func (c *Client) RemovePod(ctx context.Context, id string) (*PodRemoval, error) {
	var res PodRemoval
	if err := c.call(ctx, routeRemovePod.request(nil, id), nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
