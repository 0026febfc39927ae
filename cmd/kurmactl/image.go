package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/imagefetch/imageref"
)

// schemes lists the URI schemes images come from: imageref.Schemes, the
// one list kurmad's config check and fetcher read.
func schemes() string {
	return strings.Join(imageref.SchemeNames(), "://, ") + "://"
}

func newImageCmd(c *cli) *cobra.Command {
	cmd := group("image", "Manage the images networks' plugins run from")
	cmd.AddCommand(newImagePullCmd(c), newImageLsCmd(c), newImageRmCmd(c))
	return cmd
}

func newImagePullCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "pull URI",
		Short: "Fetch an image into kurmad's store",
		Long: "Fetch an image into kurmad's store. URI is any form of a network's \"image\"\n" +
			"(docs/images.md): " + schemes() + ",\nor an appc name found by discovery. Progress is shown on stderr.",
		Example: "  kurmactl image pull docker://registry.example.com/kurma/bridge:1.0",
		Args:    nonEmpty("an image URI", cobra.ExactArgs(1)),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			// Checked here, before kurmad is asked: a path without
			// file:// gets its "did you mean", and a relative file://
			// is this directory's, not kurmad's.
			cwd, err := os.Getwd()
			if err != nil {
				return err
			}
			uri, msg := imageref.Resolve(args[0], cwd)
			if msg != "" {
				return fmt.Errorf("image %s", msg)
			}
			p := newProgress(cmd.ErrOrStderr(), uri)
			img, err := c.client().PullImage(cmd.Context(), uri, p.update)
			p.finish(err == nil)
			if err != nil {
				return err
			}
			if c.json() {
				return printJSON(cmd.OutOrStdout(), img)
			}
			return printImages(cmd.OutOrStdout(), []api.Image{*img})
		}),
	}
}

func newImageLsCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List images in the store",
		Args:    cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			imgs, err := c.client().Images(cmd.Context())
			if err != nil {
				return err
			}
			if imgs == nil {
				imgs = []api.Image{}
			}
			if c.json() {
				return printJSON(cmd.OutOrStdout(), imgs)
			}
			return printImages(cmd.OutOrStdout(), imgs)
		}),
	}
}

func newImageRmCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID...",
		Short: "Remove images from the store",
		Long: `Remove images. ID may be a unique prefix of the image ID as shown by image ls
(e.g. sha512-0123456789ab). An image a network runs from is refused.`,
		Args: nonEmpty("an image ID", cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl := c.client()
			return removeEach(cmd, c, "image", args,
				func(ctx context.Context, arg string) (string, error) { return resolveImage(ctx, cl, arg) },
				cl.RemoveImage)
		},
	}
}

// resolveImage turns a unique prefix of an image ID into the ID; when
// nothing matches, arg is returned for the server to refuse.
func resolveImage(ctx context.Context, cl *api.Client, arg string) (string, error) {
	imgs, err := cl.Images(ctx)
	if err != nil {
		return "", err
	}
	var ids []string
	for _, img := range imgs {
		if img.ID == arg {
			return arg, nil
		}
		if arg != "" && strings.HasPrefix(img.ID, arg) {
			ids = append(ids, img.ID)
		}
	}
	switch len(ids) {
	case 1:
		return ids[0], nil
	case 0:
		return arg, nil
	}
	return "", fmt.Errorf("%q matches %d images: give more of the ID", arg, len(ids))
}

func printImages(w io.Writer, imgs []api.Image) error {
	now := time.Now()
	t := newTable(w, "ID", "NAME", "VERSION", "FORMAT", "SIZE", "VERIFIED", "FETCHED", "USED BY")
	for _, img := range imgs {
		t.row(shortID(img.ID), img.Name, img.Version, img.Format, humanBytes(img.Size),
			verified(img.Verified), age(img.Fetched, now), strings.Join(img.InUse, ","))
	}
	return t.flush()
}

// verified shows how an image was verified: "key <long key ID>" (the last
// 16 hex digits of the signing key's fingerprint), "policy" (a signature
// policy accepted it under verify required), "policy, if-signed" (the
// policy as written accepted it) or "none".
func verified(v *api.ImageVerification) string {
	switch {
	case v == nil:
		return "none"
	case v.Method == "signature" && len(v.Key) > 16:
		return "key " + v.Key[len(v.Key)-16:]
	case v.Method == "signature":
		return "key " + v.Key
	case v.Method == "policy" && v.Mode != "required":
		return "policy, " + v.Mode
	}
	return v.Method
}

// progress shows a pull's progress: a bar redrawn in place on a terminal,
// otherwise a plain line at most every few seconds.
type progress struct {
	w        io.Writer
	uri      string
	tty      bool
	last     time.Time
	lastLine string
	shown    bool
}

func newProgress(w io.Writer, uri string) *progress {
	return &progress{w: w, uri: uri, tty: isTerminal(w)}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func (p *progress) update(done, total int64) {
	complete := total > 0 && done >= total
	now := time.Now()
	interval := 2 * time.Second
	if p.tty {
		interval = 100 * time.Millisecond
	}
	if p.shown && !complete && now.Sub(p.last) < interval {
		return
	}
	p.last, p.shown = now, true
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", p.bar(done, total))
		return
	}
	line := p.line(done, total)
	if line != p.lastLine {
		fmt.Fprintln(p.w, line)
		p.lastLine = line
	}
}

func (p *progress) line(done, total int64) string {
	if total <= 0 {
		return fmt.Sprintf("pulling %s: %s", p.uri, humanBytes(done))
	}
	return fmt.Sprintf("pulling %s: %s / %s (%d%%)", p.uri, humanBytes(done), humanBytes(total), percent(done, total))
}

func (p *progress) bar(done, total int64) string {
	if total <= 0 {
		return fmt.Sprintf("pulling %s  %s", p.uri, humanBytes(done))
	}
	const width = 30
	pct := percent(done, total)
	fill := width * pct / 100
	bar := strings.Repeat("=", fill)
	if fill < width {
		bar += ">" + strings.Repeat(" ", width-fill-1)
	}
	return fmt.Sprintf("[%s] %3d%%  %s / %s", bar, pct, humanBytes(done), humanBytes(total))
}

func (p *progress) finish(ok bool) {
	if p.tty && p.shown {
		fmt.Fprintln(p.w)
	}
}

func percent(done, total int64) int {
	if total <= 0 {
		return 0
	}
	pct := int(done * 100 / total)
	return min(max(pct, 0), 100)
}
