package intake_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"tally/ledger"
)

// This file tests the live results page in a real browser: headless
// Chromium, driven through the DevTools protocol (chromedp). Chromium comes
// from scripts/chromium.sh, which finds it or, as root, installs Debian's
// chromium package; without one the test fails, saying what to install.
// The page's screenshot goes to the test's artifact directory: kept with
// go test -artifacts (under -outputdir), removed after the test otherwise.

// chromium is the path of the browser scripts/chromium.sh finds or
// installs; it fails t, with what to install, when there is none.
func chromium(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("../scripts/chromium.sh")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	path := strings.TrimSpace(string(out))
	if err != nil || path == "" {
		t.Fatalf("the browser tests need Chromium or Chrome, and scripts/chromium.sh found none (%v):\n%s\n"+
			"install it (sudo apt-get update && sudo apt-get install -y chromium), or set TALLY_CHROMIUM to its path",
			err, stderr.String())
	}
	return path
}

// browser starts a headless Chromium for t, its window 360 px wide (a
// small phone), and returns a context to drive it with, ended with t.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.WindowSize(360, 780),
		chromedp.Flag("disable-dev-shm-usage", true), // containers have a small /dev/shm
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// text is the text of the element sel selects on the page of ctx.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("the text of %s: %v", sel, err)
	}
	return s
}

// eval is the value of the JavaScript expression js on the page of ctx.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// TestLivePageInBrowser: in a 360 px wide Chromium, the public page of a
// poll shows its figures at load; votes appended as the projector appends
// them move the bar and the count without a reload, within 2 seconds;
// every choice's label and figures are text of adequate contrast, and
// nothing overflows the width. With JavaScript off the page shows the
// figures all the same. The screenshot is saved for people to look at.
func TestLivePageInBrowser(t *testing.T) {
	b := setup(t)
	b.poll(t, ledger.Poll{ID: "docs", Title: "Which topic should the next docs sprint cover?",
		Choices: []string{"install", "tutorial", "reference", "faq"}, PublicResults: true})
	base := logSize(t, b, "docs") // the definition's leaf; the votes follow
	appendTo(t, b, "docs", "tutorial", "t1", "t2")
	appendTo(t, b, "docs", "reference", "r1")
	ctx := browser(t)
	url := b.url + "/polls/docs"

	err := chromedp.Do(ctx,
		chromedp.EmulateViewport(360, 780),
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(`#results`)),
	)
	if err != nil {
		t.Fatalf("load the page: %v", err)
	}
	if count := text(t, ctx, `li[data-candidate="tutorial"] .count`); count != "2" {
		t.Fatalf("tutorial shows %q votes at load, want 2", count)
	}
	// Connected: the script says so once the first event arrived.
	_, err = chromedp.Run(ctx, chromedp.Poll[chromedp.Void](`document.getElementById("live-status").textContent.startsWith("Live")`,
		chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil {
		t.Fatalf("the page did not connect to its stream: %v (live status %q)", err, text(t, ctx, `#live-status`))
	}
	eval[bool](t, ctx, `window.notReloaded = true`)

	appendTo(t, b, "docs", "install", "i1", "i2", "i3")
	appendTo(t, b, "docs", "tutorial", "t3")
	start := time.Now()
	_, err = chromedp.Run(ctx, chromedp.Poll[chromedp.Void](`document.querySelector('li[data-candidate="install"] .count').textContent === "3" &&
		document.querySelector('li[data-candidate="tutorial"] .count').textContent === "3" &&
		document.getElementById("total").textContent === "7"`,
		chromedp.WithPollingTimeout(2*time.Second), chromedp.WithPollingInterval(20*time.Millisecond)))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("the page did not show the appended votes within 2s (total %q): %v", text(t, ctx, `#total`), err)
	}
	t.Logf("the appended votes showed on the page in %s", took.Round(time.Millisecond))
	if !eval[bool](t, ctx, `window.notReloaded === true`) {
		t.Fatal("the page was reloaded to show the new figures")
	}
	width := eval[string](t, ctx, `document.querySelector('li[data-candidate="install"] .fill').style.width`)
	share := text(t, ctx, `li[data-candidate="install"] .share`)
	wantSize := strconv.FormatInt(base+7, 10) // seven votes after the definition
	if treeSize := text(t, ctx, `#tree-size`); width != "42.9%" || share != "42.9%" || treeSize != wantSize {
		t.Fatalf("install's bar %q and share %q (want 42.9%% each), tree size %q (want %s)", width, share, treeSize, wantSize)
	}

	checkAccessible(t, ctx)

	time.Sleep(600 * time.Millisecond)                           // the bars' transition
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: a PNG
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.ArtifactDir(), "live-page-360.png")
	if err := os.WriteFile(file, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", file)

	checkWithoutJavaScript(t, ctx, url)
}

// checkAccessible checks the page at hand: each choice has its label, its
// count and its share as text; text has a contrast of 4.5:1 at least and
// the bars 3:1 against their track; nothing is wider than the 360 px
// viewport.
func checkAccessible(t *testing.T, ctx context.Context) {
	t.Helper()
	type accessibility struct {
		Choices      int      `json:"choices"`
		Missing      []string `json:"missing"`
		TextContrast float64  `json:"textContrast"`
		BarContrast  float64  `json:"barContrast"`
		ScrollWidth  int      `json:"scrollWidth"`
		Viewport     int      `json:"viewport"`
	}
	a := eval[accessibility](t, ctx, `(function () {
		function lum(color) {
			var c = color.match(/[\d.]+/g).slice(0, 3).map(function (v) {
				v = Number(v) / 255;
				return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
			});
			return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
		}
		function contrast(a, b) {
			var x = lum(a), y = lum(b);
			return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05);
		}
		var bg = getComputedStyle(document.body).backgroundColor;
		var text = 99, missing = [];
		document.querySelectorAll("h1, .state, .label, .nums, .total, .log, .status").forEach(function (el) {
			text = Math.min(text, contrast(getComputedStyle(el).color, bg));
		});
		var items = document.querySelectorAll("li[data-candidate]");
		items.forEach(function (li) {
			var id = li.getAttribute("data-candidate");
			if (li.querySelector(".label").textContent.trim() !== id) missing.push(id + ": label");
			if (!/^\d+$/.test(li.querySelector(".count").textContent)) missing.push(id + ": count");
			if (!/^\d+\.\d%$/.test(li.querySelector(".share").textContent)) missing.push(id + ": share");
		});
		var fill = document.querySelector(".fill"), bar = document.querySelector(".bar");
		return {
			choices: items.length, missing: missing, textContrast: text,
			barContrast: contrast(getComputedStyle(fill).backgroundColor, getComputedStyle(bar).backgroundColor),
			scrollWidth: document.documentElement.scrollWidth, viewport: window.innerWidth
		};
	})()`)
	if a.Choices != 4 || len(a.Missing) > 0 {
		t.Errorf("%d choices shown (want 4); without their text: %v", a.Choices, a.Missing)
	}
	if a.TextContrast < 4.5 || a.BarContrast < 3 {
		t.Errorf("contrast: text %.2f:1 (want 4.5:1 at least), bars %.2f:1 (want 3:1 at least)", a.TextContrast, a.BarContrast)
	}
	if a.Viewport != 360 || a.ScrollWidth > 360 {
		t.Errorf("at a viewport %d px wide the page is %d px wide; want 360 and nothing overflowing", a.Viewport, a.ScrollWidth)
	}
}

// checkWithoutJavaScript opens url in a new tab with JavaScript off: the
// figures are on the page as served.
func checkWithoutJavaScript(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	tab, cancel := chromedp.NewContext(ctx)
	defer cancel()
	err := chromedp.Do(tab,
		chromedp.Func(func(ctx context.Context, tt *chromedp.Target) error {
			_, err := cdp.Call(ctx, tt, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
			return err
		}),
		chromedp.EmulateViewport(360, 780),
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(`#results`)),
	)
	if err != nil {
		t.Fatalf("the page without JavaScript: %v", err)
	}
	install, total, status := text(t, tab, `li[data-candidate="install"] .count`), text(t, tab, `#total`), text(t, tab, `#live-status`)
	// The status line is the one served unless the page's script ran.
	if install != "3" || total != "7" || !strings.Contains(status, "need JavaScript") {
		t.Fatalf("without JavaScript: install %q (want 3), total %q (want 7), status %q (want the one served)", install, total, status)
	}
}
