#pragma once
// A report of what the window shows: headings, text, tables (with the colours the app gives their
// cells) and images, written as one self-contained HTML file (images inline as PNG data, no other
// file needed) or, for a name ending in .pdf, the same document as a PDF through Qt's PDF writer.
// Either is written to a temporary file and renamed into place.

#include <QImage>
#include <QList>
#include <QPair>
#include <QString>

#include <vector>

class QAbstractItemModel;

namespace gsrq::studio {

class Report {
public:
    explicit Report(QString title) : m_title(std::move(title)) {}

    void heading(const QString& text, int level = 2);
    void paragraph(const QString& text);                    // plain text, escaped; newlines kept
    void facts(const QList<QPair<QString, QString>>& rows); // name: value
    // Every row and column of a table model, with its headers and its cells' text colours.
    void table(const QAbstractItemModel& model);
    void image(const QImage& image, const QString& caption);

    // With inlineImages each image is a data: URL; otherwise "image-N.png", which write() gives
    // the PDF's document as resources.
    QString html(bool inlineImages = true) const;
    // .pdf: a PDF (A4); anything else: HTML. False with *error set (naming the file) on failure,
    // leaving any earlier file of that name as it was.
    bool write(const QString& path, QString* error) const;
    // The document's top as a picture `width` pixels wide (at most `maxHeight` tall): for docs.
    QImage preview(int width, int maxHeight) const;

private:
    QString m_title;
    QString m_body; // images as @@IMAGE:N@@
    std::vector<QImage> m_images;
};

} // namespace gsrq::studio
