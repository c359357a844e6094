#include "report.h"

#include <QAbstractItemModel>
#include <QBuffer>
#include <QColor>
#include <QDateTime>
#include <QPageSize>
#include <QPainter>
#include <QPdfWriter>
#include <QSaveFile>
#include <QTextDocument>
#include <QUrl>

#include <cmath>

namespace gsrq::studio {

namespace {

QByteArray pngBytes(const QImage& image)
{
    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    image.save(&buffer, "PNG");
    return bytes;
}

} // namespace

void Report::heading(const QString& text, int level)
{
    level = std::clamp(level, 1, 4);
    m_body += QStringLiteral("<h%1>%2</h%1>\n").arg(level).arg(text.toHtmlEscaped());
}

void Report::paragraph(const QString& text)
{
    m_body += QStringLiteral("<p>%1</p>\n").arg(text.toHtmlEscaped().replace('\n', QStringLiteral("<br>")));
}

void Report::facts(const QList<QPair<QString, QString>>& rows)
{
    if (rows.isEmpty())
        return;
    m_body += QStringLiteral("<table class=\"facts\" cellspacing=\"0\" cellpadding=\"3\">\n");
    for (const auto& [name, value] : rows)
        m_body += QStringLiteral("<tr><th align=\"left\">%1</th><td>%2</td></tr>\n")
                      .arg(name.toHtmlEscaped(), value.toHtmlEscaped());
    m_body += QStringLiteral("</table>\n");
}

void Report::table(const QAbstractItemModel& model)
{
    Table t;
    for (int c = 0; c < model.columnCount(); ++c)
        t.columns << model.headerData(c, Qt::Horizontal).toString();
    for (int r = 0; r < model.rowCount(); ++r) {
        t.rowNames << model.headerData(r, Qt::Vertical).toString();
        auto& row = t.rows.emplace_back();
        for (int c = 0; c < model.columnCount(); ++c) {
            const QModelIndex i = model.index(r, c);
            const QVariant fg = model.data(i, Qt::ForegroundRole);
            QColor colour;
            if (fg.canConvert<QColor>())
                colour = fg.value<QColor>();
            row.push_back({model.data(i).toString(), colour.isValid() ? colour.name() : QString()});
        }
    }
    m_body += QStringLiteral("@@TABLE:%1@@\n").arg(m_tables.size());
    m_tables.push_back(std::move(t));
}

QString Report::tableHtml(const Table& t, int first, int last)
{
    // No cell wraps: a number broken mid-digit or a name letter by letter reads as something else.
    QString h =
        QStringLiteral("<table class=\"data\" border=\"1\" cellspacing=\"0\" cellpadding=\"3\">\n<thead><tr><th></th>");
    for (int c = first; c < last; ++c)
        h += QStringLiteral("<th style=\"white-space:nowrap\">%1</th>").arg(t.columns[c].toHtmlEscaped());
    h += QStringLiteral("</tr></thead>\n"); // repeated on every page the table spans
    for (std::size_t r = 0; r < t.rows.size(); ++r) {
        h += QStringLiteral("<tr><th align=\"left\" style=\"white-space:nowrap\">%1</th>")
                 .arg(t.rowNames.value(int(r)).toHtmlEscaped());
        for (int c = first; c < last; ++c) {
            const Cell& cell = t.rows[r][std::size_t(c)];
            const QString text = cell.text.toHtmlEscaped();
            h += cell.colour.isEmpty()
                     ? QStringLiteral("<td align=\"right\" style=\"white-space:nowrap\">%1</td>").arg(text)
                     : QStringLiteral(
                           "<td align=\"right\" style=\"white-space:nowrap\"><font color=\"%1\"><b>%2</b></font></td>")
                           .arg(cell.colour, text);
        }
        h += QStringLiteral("</tr>\n");
    }
    return h + QStringLiteral("</table>\n");
}

namespace {

// The page's style; the PDF's tables in a smaller type than the screen's, and its body without margins
// of its own (the page has them).
QString documentHtml(const QString& title, const QString& body, bool forPdf)
{
    return QStringLiteral("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%1</title>\n"
                          "<style>body{font-family:sans-serif;%4color:#222}"
                          "table.data{border-collapse:collapse;font-size:%3}th,td{padding:2px 6px}"
                          "table.facts th{padding-right:1em}p.figure{margin:1em 0}</style></head>\n"
                          "<body>\n<h1>%1</h1>\n%2</body></html>\n")
        .arg(title.toHtmlEscaped(), body, forPdf ? QStringLiteral("7pt") : QStringLiteral("90%"),
             forPdf ? QString() : QStringLiteral("max-width:60em;margin:1em auto;"));
}

} // namespace

double Report::naturalWidth(const QString& tableHtml)
{
    QTextDocument doc;
    doc.setHtml(documentHtml(QString(), tableHtml, true));
    doc.setTextWidth(1e6); // room for every cell on one line
    return doc.idealWidth();
}

std::vector<std::pair<int, int>> Report::columnGroups(const Table& t, double width)
{
    const int n = int(t.columns.size());
    if (width <= 0 || n == 0 || naturalWidth(tableHtml(t, 0, n)) <= width)
        return {{0, n}};
    // As many columns in each group as fit beside the rows' names (at least one) gives the fewest
    // groups; the columns are then spread evenly over that many, where even groups fit too.
    std::vector<std::pair<int, int>> greedy;
    for (int first = 0; first < n;) {
        int last = first + 1;
        while (last < n && naturalWidth(tableHtml(t, first, last + 1)) <= width)
            ++last;
        greedy.push_back({first, last});
        first = last;
    }
    const int g = int(greedy.size());
    std::vector<std::pair<int, int>> even;
    for (int i = 0; i < g; ++i)
        even.push_back({i * n / g, (i + 1) * n / g});
    for (const auto& [first, last] : even)
        if (naturalWidth(tableHtml(t, first, last)) > width)
            return greedy;
    return even;
}

void Report::image(const QImage& image, const QString& caption)
{
    m_body += QStringLiteral("<p class=\"figure\">@@IMAGE:%1@@<br><i>%2</i></p>\n")
                  .arg(m_images.size())
                  .arg(caption.toHtmlEscaped());
    m_images.push_back(image);
}

QString Report::html(bool inlineImages) const
{
    return html(inlineImages, 0);
}

QString Report::html(bool inlineImages, double textWidth) const
{
    QString body = m_body;
    for (std::size_t i = 0; i < m_tables.size(); ++i) {
        const auto groups = columnGroups(m_tables[i], textWidth);
        QString tables;
        for (std::size_t g = 0; g < groups.size(); ++g) {
            if (groups.size() > 1)
                tables += QObject::tr("<p><i>Columns %1–%2 of %3</i></p>\n")
                              .arg(groups[g].first + 1)
                              .arg(groups[g].second)
                              .arg(m_tables[i].columns.size());
            tables += tableHtml(m_tables[i], groups[g].first, groups[g].second);
        }
        body.replace(QStringLiteral("@@TABLE:%1@@").arg(i), tables);
    }
    for (std::size_t i = 0; i < m_images.size(); ++i) {
        const QImage& im = m_images[i];
        // At most 680 pixels wide on the page; the PNG keeps every pixel.
        const int width = std::min(im.width(), 680);
        const QString src =
            inlineImages ? QStringLiteral("data:image/png;base64,") + QString::fromLatin1(pngBytes(im).toBase64())
                         : QStringLiteral("image-%1.png").arg(i);
        body.replace(QStringLiteral("@@IMAGE:%1@@").arg(i),
                     QStringLiteral("<img src=\"%1\" width=\"%2\" alt=\"figure %3\">").arg(src).arg(width).arg(i + 1));
    }
    return documentHtml(m_title, body, textWidth > 0);
}

Report::PdfLayout Report::pdfLayout(QTextDocument& doc) const
{
    for (std::size_t i = 0; i < m_images.size(); ++i)
        doc.addResource(QTextDocument::ImageResource, QUrl(QStringLiteral("image-%1.png").arg(i)),
                        QVariant(m_images[i]));
    // A4 at 96 dpi with margins of 20 points; landscape where a table is wider than portrait's text.
    PdfLayout out;
    const auto pageIn = [&](QPageLayout::Orientation o) {
        QPageLayout l(QPageSize(QPageSize::A4), o, QMarginsF(20, 20, 20, 20), QPageLayout::Point);
        return l.paintRectPixels(96).size().toSizeF();
    };
    const double margin = doc.documentMargin();
    out.page = pageIn(QPageLayout::Portrait);
    out.textWidth = out.page.width() - 2 * margin;
    for (const auto& t : m_tables)
        if (naturalWidth(tableHtml(t, 0, int(t.columns.size()))) > out.textWidth) {
            out.orientation = QPageLayout::Landscape;
            out.page = pageIn(QPageLayout::Landscape);
            out.textWidth = out.page.width() - 2 * margin;
            break;
        }
    doc.setHtml(html(false, out.textWidth));
    doc.setPageSize(out.page);
    return out;
}

QImage Report::preview(int width, int maxHeight) const
{
    QTextDocument doc;
    for (std::size_t i = 0; i < m_images.size(); ++i)
        doc.addResource(QTextDocument::ImageResource, QUrl(QStringLiteral("image-%1.png").arg(i)),
                        QVariant(m_images[i]));
    doc.setHtml(html(false));
    doc.setTextWidth(width);
    const int height = std::min(int(std::ceil(doc.size().height())), maxHeight);
    QImage image(width, height, QImage::Format_ARGB32);
    image.fill(Qt::white);
    QPainter p(&image);
    doc.drawContents(&p, QRectF(0, 0, width, height));
    return image;
}

bool Report::write(const QString& path, QString* error) const
{
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly)) {
        *error = QObject::tr("Cannot write %1: %2").arg(path, file.errorString());
        return false;
    }
    if (path.endsWith(QStringLiteral(".pdf"), Qt::CaseInsensitive)) {
        QTextDocument doc;
        const PdfLayout layout = pdfLayout(doc);
        QPdfWriter pdf(&file);
        pdf.setPageLayout(
            QPageLayout(QPageSize(QPageSize::A4), layout.orientation, QMarginsF(20, 20, 20, 20), QPageLayout::Point));
        pdf.setResolution(96);
        pdf.setTitle(m_title);
        pdf.setCreator(QStringLiteral("GSRQ Studio"));
        doc.print(&pdf);
    } else {
        const QByteArray bytes = html(true).toUtf8();
        if (file.write(bytes) != bytes.size()) {
            *error = QObject::tr("Cannot write %1: %2").arg(path, file.errorString());
            return false;
        }
    }
    if (!file.commit()) {
        *error = QObject::tr("Cannot write %1: %2 (any earlier file of that name is unchanged)")
                     .arg(path, file.errorString());
        return false;
    }
    return true;
}

} // namespace gsrq::studio
