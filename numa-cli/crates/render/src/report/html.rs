//! What every page shares: its styles and the escaping of text.

/// The styles of every page; `max_width` of its body.
pub(super) fn style(max_width: &str) -> String {
    format!(
        "<style>body{{font-family:sans-serif;max-width:{max_width};margin:2em auto;color:#222}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}\
         th{{background:#f3f3f3}}.note{{color:#555;font-size:90%}}</style>"
    )
}

/// Text made safe inside HTML elements and attribute values.
pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
