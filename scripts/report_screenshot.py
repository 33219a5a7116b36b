"""A screenshot of a report.html for the gallery: the latency-by-keys-written
chart with its hover showing, in Debian's headless Chromium (as the browser
test runs). That chart has a point per 1% of the keys, so the hover lands
inside it however short the load; the demo's throughput chart has only a
point or two per second, and its hover fell on the edge, half cut off.

    python scripts/report_screenshot.py plots/gallery/report.html plots/gallery/report.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
WIDTH, HEIGHT = 1280, 820


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--chart", default="AVG-LATENCY-MS-BY-KEY", help="the chart to hover")
    args = parser.parse_args()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            page.goto(args.report.resolve().as_uri())
            page.wait_for_function(
                "() => window.Bokeh !== undefined && Bokeh.documents.length == 1"
                " && Bokeh.documents[0].is_idle",
                timeout=60_000,
            )
            # the chart below the (sticky) database checkboxes, hovered in its middle
            page.evaluate(
                "name => { const el = document.getElementById('chart-' + name);"
                " window.scrollTo(0, el.getBoundingClientRect().top + window.scrollY - 330); }",
                args.chart,
            )
            box = page.locator(f"#chart-{args.chart}").bounding_box()
            assert box is not None, f"no chart {args.chart} in {args.report}"
            page.mouse.move(box["x"] + box["width"] * 0.45, box["y"] + box["height"] * 0.5)
            page.locator(".bk-Tooltip .hover-y").first.wait_for(state="visible")
            page.screenshot(path=str(args.png))
        finally:
            browser.close()
    print(f"{args.png}: {args.png.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
