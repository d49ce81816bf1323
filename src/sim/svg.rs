//! Small pieces shared by the replay charts (chart.svg, jct_cdf.svg): escaping, text, and a
//! legend laid out in rows inside the image.

use std::fmt::Write as _;

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The opening of an SVG document with a white background.
pub fn open(width: f64, height: f64) -> String {
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    svg
}

/// Text at (x, y); `anchor` is start, middle or end; `extra` more attributes.
pub fn text(svg: &mut String, x: f64, y: f64, anchor: &str, extra: &str, body: &str) {
    let _ = writeln!(svg, r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}" {extra}>{}</text>"#, escape(body));
}

/// Text turned a quarter left, centred on (x, y): a vertical axis' caption.
pub fn vertical_caption(svg: &mut String, x: f64, y: f64, body: &str) {
    let _ = writeln!(
        svg,
        r##"<text x="{x:.1}" y="{y:.1}" text-anchor="middle" font-size="11" fill="#444" transform="rotate(-90 {x:.1} {y:.1})">{}</text>"##,
        escape(body)
    );
}

/// How a legend entry is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Swatch {
    Fill(&'static str),
    Line(&'static str),
    Dashed(&'static str),
}

/// The width a label takes at 12 px, roughly (sans-serif averages under 7 px a character).
fn text_width(s: &str) -> f64 {
    s.chars().count() as f64 * 6.6
}

/// A legend from `x` to `right`, starting at `y`, wrapping to more rows when needed; returns the
/// y under its last row.
pub fn legend_rows(svg: &mut String, x: f64, right: f64, y: f64, items: &[(Swatch, String)]) -> f64 {
    let (mut cx, mut cy) = (x, y);
    for (swatch, label) in items {
        let w = 18.0 + text_width(label) + 22.0;
        if cx > x && cx + w > right {
            cx = x;
            cy += 18.0;
        }
        match swatch {
            Swatch::Fill(c) => {
                let _ = writeln!(svg, r#"<rect x="{cx:.1}" y="{:.1}" width="12" height="12" fill="{c}"/>"#, cy - 10.0);
            }
            Swatch::Line(c) | Swatch::Dashed(c) => {
                let dash = if matches!(swatch, Swatch::Dashed(_)) { r#" stroke-dasharray="4,3""# } else { "" };
                let _ = writeln!(
                    svg,
                    r#"<line x1="{cx:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{c}" stroke-width="2"{dash}/>"#,
                    cy - 4.0,
                    cx + 12.0,
                    cy - 4.0
                );
            }
        }
        text(svg, cx + 18.0, cy, "start", "", label);
        cx += w;
    }
    cy + 18.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_legend_wraps_inside_the_image() {
        let items: Vec<(Swatch, String)> =
            (0..6).map(|k| (Swatch::Fill("#000"), format!("item number {k} <b>"))).collect();
        let mut svg = String::new();
        let bottom = legend_rows(&mut svg, 10.0, 400.0, 20.0, &items);
        // Each entry is about 18 + 119 + 22 px: two a row in 390 px, three rows.
        assert_eq!(bottom, 20.0 + 3.0 * 18.0);
        assert!(svg.contains("item number 5 &lt;b&gt;"));
        for x in svg.split("x=\"").skip(1).map(|s| s.split('"').next().unwrap().parse::<f64>().unwrap()) {
            assert!((10.0..400.0).contains(&x), "{x}");
        }
    }
}
