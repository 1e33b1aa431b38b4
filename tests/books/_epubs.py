"""Two EPUBs written here, one of each version, with what real books hold: a navigation
document or an NCX, a cover, footnotes with their back-links, a table, page numbers, a script,
a style, named entities, a chapter split across files and two chapters in one file."""

from __future__ import annotations

import struct
import zlib

from loadtest._hostile_books import CONTAINER, zip_archive


def png(width: int = 2, height: int = 2) -> bytes:
    """A real PNG (grey pixels), for covers."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


COVER = png()

_XHTML3 = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"
      xml:lang="en-GB" lang="en-GB">
<head><title>{title}</title><link rel="stylesheet" href="../style.css" type="text/css"/>
<style>p {{ color: red; }}</style>
<script type="text/javascript">document.write("scripted words");</script></head>
<body>{body}</body></html>"""

PACKAGE3 = """<?xml version="1.0" encoding="UTF-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="uid">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
    <dc:identifier id="uid">urn:uuid:12345</dc:identifier>
    <dc:title>The Lighthouse</dc:title>
    <dc:creator id="c1">Ada Keeper</dc:creator>
    <meta refines="#c1" property="role" scheme="marc:relators">aut</meta>
    <dc:creator id="c2">Ed Itor</dc:creator>
    <meta refines="#c2" property="role" scheme="marc:relators">edt</meta>
    <dc:language>en-GB</dc:language>
    <meta property="dcterms:modified">2026-01-01T00:00:00Z</meta>
  </metadata>
  <manifest>
    <item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
    <item id="cover-page" href="text/cover.xhtml" media-type="application/xhtml+xml"/>
    <item id="cover" href="images/cover.png" media-type="image/png" properties="cover-image"/>
    <item id="css" href="style.css" media-type="text/css"/>
    <item id="ch1" href="text/ch1.xhtml" media-type="application/xhtml+xml"
          properties="scripted"/>
    <item id="ch2" href="text/ch2%20and%203.xhtml" media-type="application/xhtml+xml"/>
    <item id="notes" href="text/notes.xhtml" media-type="application/xhtml+xml"/>
  </manifest>
  <spine>
    <itemref idref="cover-page"/>
    <itemref idref="nav"/>
    <itemref idref="ch1"/>
    <itemref idref="ch2"/>
    <itemref idref="notes" linear="no"/>
  </spine>
</package>"""

NAV3 = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">
<head><title>Contents</title></head>
<body>
<nav epub:type="landmarks"><ol><li><a epub:type="bodymatter" href="text/ch2%20and%203.xhtml"
>Start here</a></li></ol></nav>
<nav epub:type="toc" id="toc"><h1>Contents</h1>
<ol>
  <li><a href="text/ch1.xhtml">Chapter One: <em>The Keeper</em></a></li>
  <li><a href="text/ch2%20and%203.xhtml#ch2">Chapter Two</a>
    <ol><li><a href="text/ch2%20and%203.xhtml#s1">A Section</a></li></ol></li>
  <li><a href="text/ch2%20and%203.xhtml#ch3">Chapter Three</a></li>
</ol></nav>
</body></html>"""

CH1 = """<section epub:type="chapter">
<h1>Chapter One</h1>
<p>The keeper climbed&nbsp;the stairs&mdash;all
   ninety of them.<a epub:type="noteref" href="notes.xhtml#n1" id="r1">1</a></p>
<span epub:type="pagebreak" role="doc-pagebreak" id="page12" title="12">12</span>
<p>He lit the lamp.<sup><a role="doc-noteref" href="#n2" id="r2">2</a></sup>
<script>alert("not this");</script></p>
<table><tr><th>Ship</th><th>Lights</th></tr>
<tr><td>Mary Rose</td><td>3</td></tr><tr><td>Hope.</td><td><p>none</p></td></tr></table>
<p>Line one<br/>line two.</p>
<figure><img src="../images/cover.png" alt="A lighthouse at dusk"/>
<figcaption>The light, drawn by hand.</figcaption></figure>
<aside epub:type="footnote" id="n2"><p>A note on lamps.
<a role="doc-backlink" href="#r2">↩</a></p></aside>
</section>"""

CH2 = """<section id="ch2"><h2>Chapter Two</h2><p>Ships passed in the night.</p>
<h3 id="s1">A Section</h3><p>Fog came &amp; went.</p></section>
<section id="ch3"><h2>Chapter Three</h2><p>Morning, at last.</p></section>"""

COVER3 = """<div><img src="../images/cover.png" alt="Cover: a lighthouse"/></div>"""

NOTES3 = """<aside epub:type="footnote" id="n1"><p>The first note.</p></aside>"""


def epub3() -> bytes:
    docs = {
        "text/cover.xhtml": ("Cover", COVER3),
        "text/ch1.xhtml": ("One", CH1),
        "text/ch2 and 3.xhtml": ("Two", CH2),
        "text/notes.xhtml": ("Notes", NOTES3),
    }
    return zip_archive(
        [
            ("mimetype", b"application/epub+zip"),
            ("META-INF/container.xml", CONTAINER.format(path="OEBPS/package.opf").encode()),
            ("OEBPS/package.opf", PACKAGE3.encode()),
            ("OEBPS/nav.xhtml", NAV3.encode()),
            ("OEBPS/style.css", b"p { margin: 0 }"),
            ("OEBPS/images/cover.png", COVER),
            *(
                (f"OEBPS/{path}", _XHTML3.format(title=t, body=b).encode())
                for path, (t, b) in docs.items()
            ),
        ]
    )


_XHTML2 = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" "http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>{title}</title>
<style type="text/css">/*<![CDATA[*/ .x {{ color: blue }} /*]]>*/</style></head>
<body>{body}</body></html>"""

PACKAGE2 = """<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" unique-identifier="bookid" version="2.0">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:opf="http://www.idpf.org/2007/opf">
    <dc:title>The Old House</dc:title>
    <dc:creator opf:role="aut" opf:file-as="Wren, Mary">Mary Wren</dc:creator>
    <dc:language>en</dc:language>
    <dc:identifier id="bookid">urn:isbn:0000</dc:identifier>
    <meta name="cover" content="cover-img"/>
  </metadata>
  <manifest>
    <item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>
    <item id="cover-img" href="images/cover.png" media-type="image/png"/>
    <item id="titlepage" href="title.html" media-type="application/xhtml+xml"/>
    <item id="c1" href="chap01.html" media-type="application/xhtml+xml"/>
    <item id="c2" href="chap02.html" media-type="application/xhtml+xml"/>
    <item id="c2b" href="chap02_split_001.html" media-type="application/xhtml+xml"/>
  </manifest>
  <spine toc="ncx">
    <itemref idref="titlepage"/><itemref idref="c1"/><itemref idref="c2"/>
    <itemref idref="c2b"/>
  </spine>
  <guide><reference type="cover" title="Cover" href="title.html"/></guide>
</package>"""

NCX2 = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx 2005-1//EN" "http://www.daisy.org/z3986/2005/ncx-2005-1.dtd">
<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">
<head><meta name="dtb:uid" content="urn:isbn:0000"/></head>
<docTitle><text>The Old House</text></docTitle>
<navMap>
  <navPoint id="np1" playOrder="1"><navLabel><text>I. Arrival</text></navLabel>
    <content src="chap01.html"/>
    <navPoint id="np1a" playOrder="2"><navLabel><text>The Door</text></navLabel>
      <content src="chap01.html#door"/></navPoint>
  </navPoint>
  <navPoint id="np2" playOrder="3"><navLabel><text>II. Departure</text></navLabel>
    <content src="chap02.html"/></navPoint>
</navMap>
<pageList><pageTarget type="normal" value="5"><navLabel><text>5</text></navLabel>
<content src="chap01.html#page5"/></pageTarget></pageList>
</ncx>"""

TITLE2 = """<div class="titlepage"><h1>The Old House</h1><p>A novel.</p></div>"""

CH1_2 = """<h2>I. Arrival</h2>
<p>They came in the rain.<sup><a href="#fn1" id="fnref1">[1]</a></sup> The door
was open.<span class="pagenum"><a id="page5">[5]</a></span></p>
<h3 id="door">The Door</h3>
<p>It creaked&nbsp;&#8212; as doors do&rsquo;.</p>
<div class="footnote"><p><a href="#fnref1">[1]</a> It always rained.</p></div>"""

CH2_2 = """<h2>II. Departure</h2><p>They left at dawn.</p>"""

CH2B_2 = """<p>The road was long, and the house grew small behind them.</p>"""


def epub2() -> bytes:
    docs = {
        "title.html": ("Title", TITLE2),
        "chap01.html": ("Chapter 1", CH1_2),
        "chap02.html": ("Chapter 2", CH2_2),
        "chap02_split_001.html": ("Chapter 2", CH2B_2),
    }
    return zip_archive(
        [
            ("mimetype", b"application/epub+zip"),
            ("META-INF/container.xml", CONTAINER.format(path="content.opf").encode()),
            ("content.opf", PACKAGE2.encode()),
            ("toc.ncx", NCX2.encode()),
            ("images/cover.png", COVER),
            *((path, _XHTML2.format(title=t, body=b).encode()) for path, (t, b) in docs.items()),
        ]
    )
