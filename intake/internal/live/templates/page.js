"use strict";
// Live figures: the page was rendered with the figures at load; this keeps
// them current from the server-sent events of data-live. Each results event
// carries the poll's whole state, so a reconnection needs nothing replayed.
(function () {
	var root = document.getElementById("results");
	var status = document.getElementById("live-status");
	if (!root || !window.EventSource) {
		return;
	}
	function text(id, value) {
		var el = document.getElementById(id);
		if (el && el.textContent !== value) {
			el.textContent = value;
		}
	}
	function plural(n) {
		return n === 1 ? "vote" : "votes";
	}
	// share is votes/total in tenths of a percent, rounded half up, as the
	// server renders it.
	function share(votes, total) {
		var tenths = total > 0 ? Math.round(votes * 1000 / total) : 0;
		return (tenths / 10).toFixed(1) + "%";
	}
	// mean is sum/n with two decimals, rounded half up, as the server
	// renders it.
	function mean(sum, n) {
		if (n === 0) {
			return "\u2013";
		}
		var h = Math.floor((sum * 200 + n) / (2 * n));
		return Math.floor(h / 100) + "." + (h % 100 < 10 ? "0" : "") + (h % 100);
	}
	function set(li, selector, value) {
		var el = li.querySelector(selector);
		if (el) {
			el.textContent = value;
		}
	}
	function width(li, selector, w) {
		var el = li.querySelector(selector);
		if (el) {
			el.style.width = w;
		}
	}
	var kind = root.getAttribute("data-kind") || "single";
	var maxScore = Number(root.getAttribute("data-max-score")) || 1;
	// choice renders one choice's figures as the server does for its kind.
	function choice(li, c, r, topBorda) {
		switch (kind) {
		case "approve":
			var marks = c.yes + c.no + c.abstain;
			set(li, ".yes-count", String(c.yes));
			set(li, ".no-count", String(c.no));
			set(li, ".abstain-count", String(c.abstain));
			width(li, ".fill.yes", share(c.yes, marks));
			width(li, ".fill.no", share(c.no, marks));
			width(li, ".fill.abstain", share(c.abstain, marks));
			return;
		case "score":
			set(li, ".mean", mean(c.score, c.votes));
			set(li, ".count", String(c.votes));
			set(li, ".unit", plural(c.votes));
			width(li, ".fill", share(c.score, c.votes * maxScore));
			return;
		case "ranked":
			set(li, ".borda", String(c.borda));
			set(li, ".count", String(c.votes));
			width(li, ".fill", share(c.borda, topBorda));
			return;
		}
		var s = share(c.votes, kind === "multiple" ? r.ballots : r.total);
		set(li, ".count", String(c.votes));
		set(li, ".unit", plural(c.votes));
		set(li, ".share", s);
		width(li, ".fill", s);
	}
	// ranked lists the choices by Borda count, highest first (a tie keeps
	// the poll's order), and names the Condorcet winner.
	function ranked(r) {
		var list = root.querySelector(".choices");
		r.results.map(function (c, i) { return {c: c, i: i}; })
			.sort(function (a, b) { return b.c.borda - a.c.borda || a.i - b.i; })
			.forEach(function (o) {
				var li = root.querySelector('li[data-candidate="' + o.c.candidate_id + '"]');
				if (li) {
					list.appendChild(li);
				}
			});
		text("condorcet", r.condorcet_winner ?
			"Condorcet winner: " + r.condorcet_winner + " (beats every other choice head to head)." :
			"No Condorcet winner: no choice beats every other one head to head.");
	}
	function utc(iso) {
		var d = new Date(iso);
		return isNaN(d) ? iso : d.toISOString().slice(0, 19).replace("T", " ") + " UTC";
	}
	function render(r) {
		var topBorda = 0;
		r.results.forEach(function (c) {
			topBorda = Math.max(topBorda, c.borda || 0);
		});
		r.results.forEach(function (c) {
			var li = root.querySelector('li[data-candidate="' + c.candidate_id + '"]');
			if (li) {
				choice(li, c, r, topBorda);
			}
		});
		if (kind === "ranked") {
			ranked(r);
		}
		text("total", String(r.total));
		text("total-unit", plural(r.total));
		text("ballots", String(r.ballots));
		text("ballots-unit", r.ballots === 1 ? "ballot" : "ballots");
		text("tree-size", String(r.tree_size));
		var asOf = document.getElementById("as-of");
		asOf.setAttribute("datetime", r.as_of);
		asOf.textContent = utc(r.as_of);
		var stale = document.getElementById("stale");
		if (stale) {
			stale.remove();
		}
	}
	var closesAt = root.getAttribute("data-closes-at");
	if (closesAt) {
		var left = new Date(closesAt) - Date.now();
		if (left > 0 && left < 2147483647) {
			setTimeout(function () { text("state", "Closed " + utc(closesAt)); }, left);
		}
	}
	var failures = 0;
	function connect() {
		var es = new EventSource(root.getAttribute("data-live"));
		es.addEventListener("results", function (e) {
			failures = 0;
			render(JSON.parse(e.data));
			text("live-status", "Live: the figures update as votes are counted.");
		});
		es.addEventListener("checkpoint", function (e) {
			text("checkpoint", JSON.parse(e.data).size + " entries");
		});
		es.onerror = function () {
			if (es.readyState === EventSource.CLOSED) {
				// Refused (too many viewers, or the server stops): try again
				// later, each time waiting longer, with some jitter.
				es.close();
				failures++;
				var wait = Math.min(60, 5 * Math.pow(2, failures - 1)) * (0.5 + Math.random());
				text("live-status", "Live updates paused; trying again in " + Math.round(wait) + " s. The figures shown are as of the time above.");
				setTimeout(connect, wait * 1000);
			} else {
				text("live-status", "Reconnecting for live updates…");
			}
		};
	}
	connect();
})();
