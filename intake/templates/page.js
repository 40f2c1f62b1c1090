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
	function utc(iso) {
		var d = new Date(iso);
		return isNaN(d) ? iso : d.toISOString().slice(0, 19).replace("T", " ") + " UTC";
	}
	function render(r) {
		r.results.forEach(function (c) {
			var li = root.querySelector('li[data-candidate="' + c.candidate_id + '"]');
			if (!li) {
				return;
			}
			var s = share(c.votes, r.total);
			li.querySelector(".count").textContent = String(c.votes);
			li.querySelector(".unit").textContent = plural(c.votes);
			li.querySelector(".share").textContent = s;
			li.querySelector(".fill").style.width = s;
		});
		text("total", String(r.total));
		text("total-unit", plural(r.total));
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
