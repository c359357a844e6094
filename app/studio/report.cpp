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
    m_body += QStringLiteral("<table class=\"data\" border=\"1\" cellspacing=\"0\" cellpadding=\"3\">\n<tr><th></th>");
    for (int c = 0; c < model.columnCount(); ++c)
        m_body += QStringLiteral("<th>%1</th>").arg(model.headerData(c, Qt::Horizontal).toString().toHtmlEscaped());
    m_body += QStringLiteral("</tr>\n");
    for (int r = 0; r < model.rowCount(); ++r) {
        m_body += QStringLiteral("<tr><th align=\"left\">%1</th>")
                      .arg(model.headerData(r, Qt::Vertical).toString().toHtmlEscaped());
        for (int c = 0; c < model.columnCount(); ++c) {
            const QModelIndex i = model.index(r, c);
            const QString text = model.data(i).toString().toHtmlEscaped();
            const QVariant fg = model.data(i, Qt::ForegroundRole);
            QColor colour;
            if (fg.canConvert<QColor>())
                colour = fg.value<QColor>();
            m_body += colour.isValid() ? QStringLiteral("<td align=\"right\"><font color=\"%1\"><b>%2</b></font></td>")
                                             .arg(colour.name(), text)
                                       : QStringLiteral("<td align=\"right\">%1</td>").arg(text);
        }
        m_body += QStringLiteral("</tr>\n");
    }
    m_body += QStringLiteral("</table>\n");
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
    QString body = m_body;
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
    return QStringLiteral("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%1</title>\n"
                          "<style>body{font-family:sans-serif;max-width:60em;margin:1em auto;color:#222}"
                          "table.data{border-collapse:collapse;font-size:90%}th,td{padding:2px 6px}"
                          "table.facts th{padding-right:1em}p.figure{margin:1em 0}</style></head>\n"
                          "<body>\n<h1>%1</h1>\n%2</body></html>\n")
        .arg(m_title.toHtmlEscaped(), body);
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
        for (std::size_t i = 0; i < m_images.size(); ++i)
            doc.addResource(QTextDocument::ImageResource, QUrl(QStringLiteral("image-%1.png").arg(i)),
                            QVariant(m_images[i]));
        doc.setHtml(html(false));
        QPdfWriter pdf(&file);
        pdf.setPageSize(QPageSize(QPageSize::A4));
        pdf.setResolution(96);
        pdf.setTitle(m_title);
        pdf.setCreator(QStringLiteral("GSRQ Studio"));
        doc.setPageSize(QSizeF(pdf.width(), pdf.height()));
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
