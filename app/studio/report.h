#pragma once
// A report of what the window shows: headings, text, tables (with the colours the app gives their
// cells) and images, written as one self-contained HTML file (images inline as PNG data, no other
// file needed) or, for a name ending in .pdf, the same document as a PDF through Qt's PDF writer.
// Either is written to a temporary file and renamed into place. In the PDF no cell wraps: the page
// turns to landscape where a table needs it, and a table wider than the page is split into column
// groups, each repeating the rows' names.

#include <QImage>
#include <QList>
#include <QPageLayout>
#include <QPair>
#include <QString>

#include <vector>

class QAbstractItemModel;
class QTextDocument;

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
    // The document the PDF prints: tables in column groups that fit `textWidth` pixels (at 96 dpi), or
    // none where textWidth ≤ 0. pdfLayout() says which orientation write() takes and the text width it
    // leaves, and fills `doc` with what it prints.
    QString html(bool inlineImages, double textWidth) const;
    struct PdfLayout {
        QPageLayout::Orientation orientation = QPageLayout::Portrait;
        QSizeF page;          // the printable area, pixels at 96 dpi
        double textWidth = 0; // the page less the document's margins
    };
    PdfLayout pdfLayout(QTextDocument& doc) const;
    // The document's top as a picture `width` pixels wide (at most `maxHeight` tall): for docs.
    QImage preview(int width, int maxHeight) const;

private:
    struct Cell {
        QString text;
        QString colour; // "#rrggbb", or empty
    };
    struct Table {
        QStringList columns;
        QStringList rowNames;
        std::vector<std::vector<Cell>> rows;
    };
    // A table's columns [first, last) beside its rows' names.
    static QString tableHtml(const Table& t, int first, int last);
    // The column groups of t that each fit `width` pixels (the whole table where width ≤ 0).
    static std::vector<std::pair<int, int>> columnGroups(const Table& t, double width);
    static double naturalWidth(const QString& tableHtml);

    QString m_title;
    QString m_body; // images as @@IMAGE:N@@, tables as @@TABLE:N@@
    std::vector<QImage> m_images;
    std::vector<Table> m_tables;
};

} // namespace gsrq::studio
